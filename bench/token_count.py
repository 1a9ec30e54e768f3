"""Tokens as a model reads them: `o200k_base` (the encoding of OpenAI's recent models),
counted with npm `js-tiktoken`, which ships its ranks. Python `tiktoken` fetches its
encoding file from the internet on first use, which this machine may not reach.

js-tiktoken is installed from the npm registry into .cache/js-tiktoken on first use;
`count` runs one node process for all the texts it is given.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

PACKAGE = "js-tiktoken"
VERSION = "1.0.21"  # the newest on the registry when pinned
ENCODING = "o200k_base"
REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "js-tiktoken"
_SCRIPT = """
const { getEncoding } = require(process.argv[1] + "/node_modules/js-tiktoken");
const encoding = getEncoding(process.argv[2]);
let raw = "";
process.stdin.on("data", (chunk) => { raw += chunk; });
process.stdin.on("end", () => {
  process.stdout.write(JSON.stringify(JSON.parse(raw).map((t) => encoding.encode(t).length)));
});
"""


def _installed() -> bool:
    try:
        manifest = json.loads((CACHE / "node_modules" / PACKAGE / "package.json").read_text())
    except (FileNotFoundError, ValueError):
        return False
    return bool(manifest.get("version") == VERSION)


def install() -> None:
    """js-tiktoken into the cache, once (parallel runs wait for the first)."""
    if _installed():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("counting tokens needs node and npm (js-tiktoken)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".install-lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed():
            subprocess.run([npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund",
                            "--save-exact", f"{PACKAGE}@{VERSION}"],
                           capture_output=True, timeout=900, check=True)


def count(texts: Sequence[str]) -> list[int]:
    """The tokens of each text."""
    if not texts:
        return []
    install()
    done = subprocess.run(["node", "-e", _SCRIPT, str(CACHE), ENCODING],
                          input=json.dumps(list(texts)), capture_output=True, text=True,
                          timeout=300, check=True)
    return [int(n) for n in json.loads(done.stdout)]
