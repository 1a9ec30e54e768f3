"""The code stays lint-clean (ruff) and strictly typed (mypy --strict)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_layout import PACKAGES

ROOT = Path(__file__).resolve().parents[2]



def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
        check=False,
    )


def test_ruff() -> None:
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_strict() -> None:
    result = _run("mypy", *PACKAGES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_type_stubs_come_with_a_plain_install() -> None:
    """mypy --strict on the packages needs the stubs of what they import: a plain `pip
    install .` has them, as it has the packages they describe, and no extra lists any."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for reqs in project["optional-dependencies"].values() for r in reqs]
    assert [r for r in extras if r.startswith("types-")] == []
    names = {r.split("==")[0].split("[")[0] for r in project["dependencies"]}
    assert {f"types-{n}" for n in ("defusedxml",)} <= names
