"""The repository stands on its own: code, tests and docs cite docs/ (a file and a
section name, e.g. docs/http.md, "Errors"), never a document kept outside it.

Every tracked text file is read (GraphiQL's vendored bundle aside), and each mention
of the outside document is reported as file:line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = ("graph_bridge/graphiql/",)

# The forms the outside document was cited by (the examples in the test below).
# Written so that this file does not match itself; the word in ordinary English
# ("a contract of this function") is left alone.
_OUTSIDE = re.compile(
    "|".join([
        r"contract[\s#*/-]*\(?§",  # the word, then a section number (a line break between)
        r"contract\s+sections?\s+\d",  # the word, then "section" and a number
        r"(?<![a-z])the[\s_]+contract(?![a-z])",  # the document by name, a test's name too
        r"^[ \t#*/\"-]*contract[ \t]*[:§]",  # a comment or docstring opening with the word
        "CONTRACT" + r"\.md",
        r"\.\./shared\b",
        r"/work/(?:shared)\b",
    ]),
    re.IGNORECASE | re.MULTILINE,
)


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode()
    return [p for p in listed.split("\0") if p and not p.startswith(SKIP)]


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary (a NUL, or not UTF-8) or a file gone."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def mentions(path: str, text: str) -> list[str]:
    """`path:line: the line` for each mention of the outside document in `text`."""
    lines = text.splitlines()
    found: dict[int, str] = {}
    for match in _OUTSIDE.finditer(text):
        number = text.count("\n", 0, match.start()) + 1
        found.setdefault(number, f"{path}:{number}: {lines[number - 1].strip()[:120]}")
    return list(found.values())


def test_the_patterns_catch_the_forms_once_used_and_spare_english() -> None:
    def word(text: str) -> str:  # "@" stands for the word, so this file names nothing
        return text.replace("@", "contract")

    cited = ["(@ §14)", "@ (§9)", "@\n-- §14", "@ section 5", "the @'s envelope",
             "per the spec and the @:", "    @: a PATCH", '"""@ §6; the pattern."""',
             "test_errors_carry_the_@_code", "see " + "CONTRACT" + ".md", "../" + "shared/x"]
    for text in map(word, cited):
        assert mentions("f", text), text
    for text in map(word, ["a @ of this function", "@s between modules", "RFC 6750 §3",
                           "JSON Schema validation §6", "the @ion"]):
        assert not mentions("f", text), text
    assert not mentions("f", Path(__file__).read_text())


def test_no_file_names_the_outside_document() -> None:
    found = []
    for name in _tracked():
        text = _text(ROOT / name)
        if text is not None:
            found += mentions(name, text)
    assert not found, (
        "cite docs/ (a file and a section name) instead of the outside document:\n"
        + "\n".join(found))
