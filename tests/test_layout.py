"""Who may import whom (docs/layout.md), checked from the source: an AST walk
of every module's imports, lazy ones inside functions included."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kalends", "graph", "rest_bridge", "mcp_bridge", "db")

BRIDGES = ("rest_bridge", "mcp_bridge")
TRANSPORTS = (*BRIDGES, "graph", "kalends.oauth.http")
HTTP_LAYER = "kalends.web"
NOT_DOMAIN = ("kalends.service", HTTP_LAYER, "kalends.registry", "kalends.operations",
              "kalends.oauth.http", "kalends.__main__")

# (who, what it must not import, what it may import all the same)
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("rest_bridge", ("mcp_bridge",), ()),
    ("mcp_bridge", ("rest_bridge",), ()),
    # The one HTTP layer stands below every transport.
    (HTTP_LAYER, TRANSPORTS, ()),
    ("graph", BRIDGES, ()),
    ("kalends.oauth.http", BRIDGES, ()),
    # db/ is the bottom: only the one typed error of the rules above it.
    ("db", ("kalends", "graph", *BRIDGES), ("kalends.errors",)),
)
DOMAIN_MUST_NOT = ("graph", *BRIDGES, HTTP_LAYER, "kalends.registry", "kalends.service.app",
                   "kalends.service.cli")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, known: Iterable[str]) -> set[str]:
    """The project modules `path` imports (a name imported from a package counts as
    that module when it is one)."""
    known = set(known)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in known else node.module)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def violations(root: Path, packages: Iterable[str] = PACKAGES) -> list[str]:
    tree = modules(root, packages)
    wrong = []
    for module, path in tree.items():
        used = imports(path, tree)
        for who, banned, allowed in RULES:
            if not _within(module, who):
                continue
            for target in used:
                if any(_within(target, b) for b in banned) and \
                        not any(_within(target, a) for a in allowed) and not _within(target, who):
                    wrong.append(f"{module} imports {target}")
        if _within(module, "kalends") and not any(_within(module, n) for n in NOT_DOMAIN):
            wrong += [f"{module} (a domain rule) imports {t}" for t in used
                      if any(_within(t, b) for b in DOMAIN_MUST_NOT)]
    return sorted(wrong)


def test_the_layout_rules_hold() -> None:
    assert violations(ROOT) == []


def unnamed_modules(root: Path) -> list[str]:
    """The modules of kalends/ and its packages that their row of docs/layout.md does not
    name (as `name` or `name.py`); kalends/operations/ is named as a whole."""
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", (root / "docs" / "layout.md").read_text(),
                           re.MULTILINE))
    unnamed = []
    for path in sorted((root / "kalends").rglob("*.py")):
        package = path.parent.relative_to(root).as_posix()
        row = rows.get("kalends/*.py" if package == "kalends" else f"{package}/", "")
        named = set(re.findall(r"`([A-Za-z_]+)(?:\.py)?`", row))
        if path.stem not in ("__init__", "__main__", *named) and package != "kalends/operations":
            unnamed.append(path.relative_to(root).as_posix())
    return unnamed


def test_the_layout_names_every_module() -> None:
    assert unnamed_modules(ROOT) == []


def test_a_bridge_importing_another_is_caught(tmp_path: Path) -> None:
    sources = {
        "rest_bridge/routes.py": "def f() -> None:\n    from mcp_bridge import tools\n",
        "mcp_bridge/tools.py": "",
        "db/events.py": "from kalends.web import guard\n",
        "kalends/web/guard.py": "",
        "kalends/events.py": "from graph.schema import schema\n",
        "graph/schema.py": "",
    }
    for name, source in sources.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    assert violations(tmp_path) == [
        "db.events imports kalends.web.guard",
        "kalends.events (a domain rule) imports graph.schema",
        "rest_bridge.routes imports mcp_bridge.tools",
    ]
