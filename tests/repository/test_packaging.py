"""`pip install .` (not editable) must ship every module and migration:
the README's first command serves from the installed wheel, not the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_layout import PACKAGES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_holds_every_module_and_migration(tmp_path: Path) -> None:
    # Build from a clean copy: a stale build/ in a working tree can hide a
    # package missing from the configuration.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", ".venv", ".cache", ".git", "__pycache__", ".*_cache"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path),
         str(source)],
        check=True, capture_output=True, timeout=180,
    )
    (wheel,) = tmp_path.glob("kalends-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for pattern in ("**/*.py", "**/*.sql")
        for path in (ROOT / package).glob(pattern)
        if "__pycache__" not in path.parts
    }
    assert expected, "no sources found"
    assert expected <= shipped, sorted(expected - shipped)
    assert any(name.endswith("entry_points.txt") for name in shipped)


def test_the_readme_starts_with_its_title_then_the_two_set_up_commands() -> None:
    # A newcomer reads the title, then the two commands for a fresh machine: one
    # that installs and serves, one that installs and tests (which CI runs as is).
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.strip()]
    assert lines[0] == "# Kalends"
    assert [line.strip() for line in lines[1:3]] == [
        "pip install . && kalends serve", "pip install -e '.[test]' && pytest"]
    assert lines[2].strip() in (ROOT / ".ci" / "run").read_text().splitlines()
