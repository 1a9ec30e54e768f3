"""Node packages for tests, installed once from the npm registry into a folder
of `.cache/` (tests/oidc_server.py, tests/icaljs.py); without npm the test is
skipped."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


def version(cache: Path, package: str) -> str | None:
    """The installed version of `package` in `cache`, if any."""
    try:
        manifest = json.loads((cache / "node_modules" / package / "package.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return str(manifest.get("version", "")) or None


def major(cache: Path, package: str) -> str | None:
    found = version(cache, package)
    return None if found is None else found.split(".")[0]


def install(cache: Path, packages: Sequence[str], installed: Callable[[], bool]) -> None:
    """`npm install` `packages` into `cache` unless `installed()` already says so.

    Under the cache's lock, the check too: parallel sessions and pytest-xdist workers
    install once, and none takes a package another is still unpacking for installed."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".install-lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed():
            return
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed")
        done = subprocess.run(
            [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund",
             "--save-exact", *packages],
            capture_output=True, text=True, timeout=900, check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert installed(), f"npm did not install {', '.join(packages)}"


def install_pinned(cache: Path, package: str, pinned: str) -> Path:
    """`package` at version `pinned` in `cache`, installed on first use, for a script that
    the system's node runs: without node the test is skipped. The cache, for that script."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    install(cache, [f"{package}@{pinned}"], lambda: version(cache, package) == pinned)
    return cache
