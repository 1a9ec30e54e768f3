"""Toolsets (docs/mcp.md): a narrowing fails closed.

X-MCP-Readonly sent more than once, or as a comma-joined list (as proxies merge
repeated headers), is read-only when any of its values is true (any case), and
?readonly=true holds whatever the header says. Repeated X-MCP-Toolsets headers and
toolsets parameters select the intersection of what each names; one that names no
known toolset leaves the others to decide.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

import aiohttp
import orjson
import pytest
from multidict import CIMultiDict, MultiDict
from oauth_flow import tokens_for

import kalends.service.app  # noqa: F401  (registers and prepares every operation)
from mcp_bridge import toolsets
from mcp_bridge.toolsets import Selection
from registry import OPERATIONS

EVERY = toolsets.toolsets(OPERATIONS.values())
RO = "X-MCP-Readonly"
TS = "X-MCP-Toolsets"


def _requested(headers: list[tuple[str, str]] | None = None, query: str = "") -> Selection:
    parsed = MultiDict(
        (k, v) for k, _, v in (p.partition("=") for p in query.split("&") if p))
    return toolsets.requested(CIMultiDict(headers or []), parsed, EVERY)


# Every one of these asks for read-only, whatever else it says.
READ_ONLY_FORMS: list[tuple[list[tuple[str, str]], str]] = [
    ([(RO, "true"), (RO, "true")], ""),
    ([(RO, "true, true")], ""),
    ([(RO, "TRUE")], ""),
    ([(RO, "TRUE,TRUE")], ""),
    ([(RO, "true"), (RO, "false")], ""),
    ([(RO, "false"), (RO, "true")], ""),
    ([(RO, "false, True")], ""),
    ([(RO, "no"), (RO, "1")], ""),
    ([(RO, "false")], "readonly=true"),
    ([(RO, "0")], "readonly=TRUE"),
    ([(RO, "true")], "readonly=false"),
    ([], "readonly=false&readonly=true"),
    ([], "readonly=true&readonly=false"),
    ([], "readonly=false,true"),
]
NOT_READ_ONLY_FORMS: list[tuple[list[tuple[str, str]], str]] = [
    ([], ""),
    ([(RO, "false")], ""),
    ([(RO, "false"), (RO, "0")], ""),
    ([(RO, "false, no")], "readonly=false"),
]


def test_readonly_fails_closed() -> None:
    for headers, query in READ_ONLY_FORMS:
        assert _requested(headers, query).read_only, (headers, query)
    for headers, query in NOT_READ_ONLY_FORMS:
        assert not _requested(headers, query).read_only, (headers, query)


def test_repeated_toolsets_select_the_intersection() -> None:
    agenda = Selection(frozenset({"agenda"}))
    assert _requested([(TS, "events,agenda"), (TS, "Agenda, calendars")]) == agenda
    assert _requested(query="toolsets=events,agenda&toolsets=agenda") == agenda
    # Header and parameter alike: neither widens what the other named.
    assert _requested([(TS, "events,agenda")], "toolsets=agenda,calendars") == agenda
    assert _requested([(TS, "agenda")], "toolsets=events,agenda,calendars") == agenda
    # One that names no known toolset leaves the others to decide.
    assert _requested([(TS, "events")], "toolsets=nope") == Selection(frozenset({"events"}))
    assert _requested([(TS, ""), (TS, "agenda")]) == agenda
    assert _requested([(TS, "agenda"), (TS, "nope,")]) == agenda
    assert _requested(query="toolsets=&toolsets=agenda") == agenda
    # None naming a known toolset narrows nothing, as one alone does.
    assert _requested([(TS, "nope"), (TS, "")], "toolsets=,") == Selection()
    # Disjoint: nothing in common, so nothing is listed (closed, not open).
    assert _requested([(TS, "events"), (TS, "agenda")]) == Selection(frozenset())
    # And the read-only narrowing composes with it.
    assert _requested([(TS, "events,agenda"), (TS, "agenda"), (RO, "true, false")]) == \
        Selection(frozenset({"agenda"}), read_only=True)


# -- on the wire: what tools/list lists and whether createProfile may be called -----------


async def _rpc(session: aiohttp.ClientSession, url: str, user: Any,
               extra: list[tuple[str, str]], method: str, params: dict[str, Any]) -> Any:
    headers = CIMultiDict(user.headers)
    headers.update({"Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"})
    for name, value in extra:
        headers.add(name, value)
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    async with session.post(url, data=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return orjson.loads(await resp.read())


async def _listed(session: aiohttp.ClientSession, url: str, user: Any,
                  extra: list[tuple[str, str]]) -> list[str]:
    names: list[str] = []
    params: dict[str, Any] = {}
    while True:
        answer = await _rpc(session, url, user, extra, "tools/list", params)
        names += [t["name"] for t in answer["result"]["tools"]]
        cursor = answer["result"].get("nextCursor")
        if not cursor:
            return names
        params = {"cursor": cursor}


async def _create_profile(session: aiohttp.ClientSession, url: str, user: Any,
                          extra: list[tuple[str, str]]) -> Any:
    return await _rpc(session, url, user, extra, "tools/call", {
        "name": "createProfile",
        "arguments": {"platform_id": "nr_" + secrets.token_hex(4), "display_name": "Narrow"}})


def _names(selection: Selection) -> list[str]:
    return [op.name for op in OPERATIONS.values() if selection.admits(op)]


async def test_readonly_header_forms_hide_and_refuse_write_tools(
    live_server: Any, user: Any
) -> None:
    read_only = _names(Selection(read_only=True))
    assert "createProfile" not in read_only
    async with aiohttp.ClientSession() as session:
        for headers, query in READ_ONLY_FORMS:
            url = live_server.url + "/mcp-developer" + (f"?{query}" if query else "")
            assert await _listed(session, url, user, headers) == read_only, (headers, query)
            answer = await _create_profile(session, url, user, headers)
            assert "result" not in answer, (headers, query, answer)
            assert answer["error"]["code"] == -32602, answer
            assert answer["error"]["message"] == "Unknown tool: createProfile", answer
        # And not narrowed: the write tool is there and works (every toolset asked).
        for headers, query in NOT_READ_ONLY_FORMS:
            url = live_server.url + "/mcp-developer?" + "&".join(filter(None, [
                "toolsets=all", query]))
            assert await _listed(session, url, user, headers) == list(OPERATIONS)
            answer = await _create_profile(session, url, user, headers)
            assert answer["result"]["isError"] is False, answer


async def test_repeated_toolsets_narrow_to_the_intersection_on_the_wire(
    live_server: Any, user: Any
) -> None:
    agenda = _names(Selection(frozenset({"agenda"})))
    events = _names(Selection(frozenset({"events"})))
    cases: list[tuple[list[tuple[str, str]], str, list[str]]] = [
        ([(TS, "events,agenda"), (TS, "agenda,calendars")], "", agenda),
        ([(TS, "events,agenda")], "toolsets=agenda", agenda),
        ([], "toolsets=events,agenda&toolsets=agenda", agenda),
        ([(TS, "events"), (TS, "nope")], "", events),
        ([(TS, "")], "toolsets=events", events),
        ([(TS, "events"), (TS, "agenda")], "", []),
    ]
    async with aiohttp.ClientSession() as session:
        for headers, query, expected in cases:
            url = live_server.url + "/mcp-developer" + (f"?{query}" if query else "")
            assert await _listed(session, url, user, headers) == expected, (headers, query)
            answer = await _create_profile(session, url, user, headers)
            assert answer["error"]["message"] == "Unknown tool: createProfile", answer


@pytest.mark.parametrize("route", ["/mcp-developer", "/mcp"])
async def test_repeated_readonly_refuses_on_both_routes(
    live_server: Any, user: Any, route: str
) -> None:
    caller = user
    if route == "/mcp":
        _, tokens = await tokens_for(live_server.url, user.api_key)
        caller = dataclasses.replace(user, api_key=tokens["access_token"])
    async with aiohttp.ClientSession() as session:
        answer = await _create_profile(session, live_server.url + route, caller,
                                       [(RO, "true"), (RO, "false")])
    assert answer["error"]["message"] == "Unknown tool: createProfile", answer
