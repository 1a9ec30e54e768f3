"""The core toolset (docs/mcp.md, "Toolsets"): what both MCP routes list when a client
names no toolset, within 8,000 tokens (`o200k_base`, counted with npm `js-tiktoken`,
which ships its ranks), and instructions that say in a few lines what else there is
and how to ask for it.

js-tiktoken is installed from the npm registry into .cache/js-tiktoken on first use
(tests/npm_cache.py), as bench/token_count.py does; without npm or node the count is
skipped.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import npm_cache
import orjson
import pytest
from conftest import caller_on
from mcp.shared.exceptions import MCPError
from test_mcp_toolsets import _session

import kalends.service.app  # noqa: F401  (registers and prepares every operation)
from registry import OPERATIONS
from registry.toolsets import CORE_TOOLS, toolsets

ROUTES = ["/mcp-developer", "/mcp"]
MAX_CORE_TOKENS = 8_000
TIKTOKEN = "js-tiktoken"
TIKTOKEN_VERSION = "1.0.21"
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "js-tiktoken"
CORE = [name for name in OPERATIONS if name in CORE_TOOLS]
_COUNT = """
const { getEncoding } = require(process.argv[1] + "/node_modules/js-tiktoken");
let raw = "";
process.stdin.on("data", (chunk) => { raw += chunk; });
process.stdin.on("end", () => {
  process.stdout.write(String(getEncoding("o200k_base").encode(raw).length));
});
"""


def install() -> Path:
    return npm_cache.install_pinned(CACHE, TIKTOKEN, TIKTOKEN_VERSION)


@pytest.fixture(scope="module")
def o200k() -> Any:
    """The tokens of a text, as `o200k_base` counts them."""
    install()

    def count(text: str) -> int:
        done = subprocess.run(["node", "-e", _COUNT, str(CACHE)], input=text,
                              capture_output=True, text=True, timeout=120, check=True)
        return int(done.stdout)

    return count


@pytest.mark.slow
@pytest.mark.parametrize("route", ROUTES)
async def test_the_core_listing_fits_8000_tokens(
        api: Any, user: Any, bearer: Any, o200k: Any, route: str) -> None:
    """The tools/list answer as sent, counted whole."""
    caller = caller_on(route, user, bearer)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    status, answer, _ = await api.post(route, caller, data=orjson.dumps(body), headers={
        "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"})
    assert status == 200, answer
    assert [tool["name"] for tool in answer["result"]["tools"]] == CORE
    tokens = o200k(json.dumps(answer["result"], separators=(",", ":"), ensure_ascii=False))
    assert tokens <= MAX_CORE_TOKENS, tokens


def test_the_core_toolset_is_a_persons_day() -> None:
    """Every core tool the registry holds, the occurrence tools once they are in."""
    assert set(CORE) == set(CORE_TOOLS) & set(OPERATIONS)
    assert set(CORE_TOOLS) - set(OPERATIONS) <= {"updateEventOccurrence",
                                                 "cancelEventOccurrence"}


@pytest.mark.parametrize(("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
@pytest.mark.parametrize("route", ROUTES)
async def test_both_routes_list_core_and_say_how_to_ask_for_more(
        live_server: Any, user: Any, bearer: Any, route: str, mode: str, version: str) -> None:
    caller = caller_on(route, user, bearer)
    async with _session(live_server.url + route, dict(caller.headers), mode) as client:
        assert client.protocol_version == version
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == CORE
        instructions = client.instructions or ""
        # A few lines: what this is, what to call first, the toolsets and how to ask.
        assert len(instructions.splitlines()) <= 8, instructions
        assert "getContext first" in instructions
        for name, ops in toolsets(OPERATIONS.values()).items():
            assert f"{name} ({len(ops)})" in instructions, name
        assert f"all ({len(OPERATIONS)})" in instructions
        assert "?toolsets=" in instructions and "X-MCP-Toolsets" in instructions
        assert f"Listed here: the {len(CORE)} tools of core." in instructions
        # The rest is unknown until asked for.
        with pytest.raises(MCPError) as raised:
            await client.call_tool("listProfiles", {})
        assert raised.value.error.code == -32602
        context = await client.call_tool("getContext", {})
        assert context.is_error is False, context.content
    async with _session(live_server.url + route + "?toolsets=all", dict(caller.headers),
                        mode) as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == list(OPERATIONS)
        assert (await client.call_tool("listProfiles", {})).is_error is False
