"""The MCP bridge (docs/mcp.md), through the official SDK and on the wire."""

from __future__ import annotations

import base64
import secrets
from typing import Any

import httpx2
import orjson
import pytest
from conftest import caller_on
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from multidict import CIMultiDict, MultiDict

from domain import accounts
from mcp_bridge.jsonrpc import RpcError
from mcp_bridge.schemas import compact, without_patterns
from mcp_bridge.tools import (
    Catalogue,
    Catalogues,
    input_schema,
    list_page,
    listed_output_schema,
    tool_annotations,
)
from registry import OPERATIONS

MODERN = "2026-07-28"
ALL = "/mcp-developer?toolsets=all"
"""The route listing every tool (without a toolset named, the core one)."""
MISSING_PROFILE = "prf_" + "0" * 32
ENVELOPE_KEYS = {"type", "code", "message", "param", "request_id", "details"}
# The whole tool catalogue, as JSON: it sits in an agent's context (a host that needs
# fewer loads a toolset: bench/mcp_catalogue.py); tools that grow past their share on
# average show here.
MAX_BYTES_PER_TOOL = 1_400


def _meta(version: str = MODERN) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "kalends-tests", "version": "1"},
    }


def _modern(method: str, params: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
    """A 2026-07-28 request with its routing headers; keyword headers override them."""
    params = {"_meta": _meta(), **(params or {})}
    sent = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        sent["Mcp-Name"] = params["name"]
    sent.update({k.replace("_", "-"): v for k, v in headers.items()})
    return {
        "body": {"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
        "headers": sent,
    }


async def _post(
    api: Any,
    user: Any,
    body: Any,
    headers: dict[str, str] | None = None,
    path: str = "/mcp-developer",
) -> tuple[int, Any, Any]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    status, answer, answer_headers = await api.post(path, user, data=raw, headers=sent)
    return status, answer, answer_headers


async def _rpc(api: Any, user: Any, request: dict[str, Any]) -> tuple[int, Any]:
    status, body, _ = await _post(api, user, request["body"], request["headers"])
    return status, body


def _assert_rpc_error(status: int, body: Any, expected_status: int, code: int) -> dict[str, Any]:
    assert status == expected_status, body
    assert body["jsonrpc"] == "2.0" and "result" not in body, body
    assert body["error"]["code"] == code, body
    return body["error"]  # type: ignore[no-any-return]


def _assert_http_refusal(status: int, body: Any, expected_status: int, code: str,
                         rpc_code: int) -> dict[str, Any]:
    """An HTTP-level refusal on an MCP route: a JSON-RPC error (id null) whose message
    is readable and whose data is the API's error envelope."""
    error = _assert_rpc_error(status, body, expected_status, rpc_code)
    assert body["id"] is None
    data = error["data"]
    assert data["code"] == code and data["message"] == error["message"]
    assert set(data) <= ENVELOPE_KEYS and data["request_id"]
    return error


def _text(result: CallToolResult) -> str:
    """The one text block a Kalends tool result carries."""
    [block] = result.content
    assert isinstance(block, TextContent)
    return block.text


def _assert_envelope(result: CallToolResult, code: str) -> dict[str, Any]:
    """An isError tool result carrying exactly the API's envelope, as its one text block
    (no structuredContent, which SDKs would check against the outputSchema)."""
    assert result.is_error is True and result.structured_content is None
    envelope = orjson.loads(_text(result))
    assert set(envelope) == {"error"}
    assert set(envelope["error"]) <= ENVELOPE_KEYS and envelope["error"]["request_id"]
    assert envelope["error"]["code"] == code, envelope
    return envelope["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("mode", "version"), [("auto", MODERN), ("legacy", "2025-11-25")])
async def test_official_sdk_lists_and_calls_tools(
    live_server: Any, user: Any, mode: str, version: str
) -> None:
    async with (
        httpx2.AsyncClient(headers=user.headers) as http,
        Client(
            streamable_http_client(live_server.url + ALL, http_client=http),
            mode=mode,
            cache=None,
        ) as client,
    ):
        assert client.protocol_version == version
        assert client.server_info is not None and client.server_info.name == "kalends"

        # One call, as agent hosts make it: the whole catalogue, no cursor to follow.
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == list(OPERATIONS)
        assert listed.next_cursor is None

        orgs = await client.call_tool("listOrganizations", {})
        assert orgs.is_error is False
        assert [o["id"] for o in orgs.structured_content["data"]] == [user.organization_id]
        assert orjson.loads(_text(orgs)) == orgs.structured_content

        handle = "mcp_" + secrets.token_hex(4)
        created = await client.call_tool(
            "createProfile", {"platform_id": handle, "display_name": "Via MCP"}
        )
        assert created.is_error is False, created.structured_content
        profile = created.structured_content
        assert profile["platform_id"] == handle and profile["id"].startswith("prf_")

        fetched = await client.call_tool("getProfile", {"profile_id": profile["id"]})
        assert fetched.structured_content["id"] == profile["id"]

        missing = await client.call_tool("getProfile", {"profile_id": MISSING_PROFILE})
        assert _assert_envelope(missing, "resource_not_found")["type"] == "not_found_error"
        unknown = await client.call_tool("getProfile", {"profile_id": profile["id"], "bogus": 1})
        assert _assert_envelope(unknown, "unknown_field")["param"] == "bogus"
        malformed = await client.call_tool("getProfile", {"profile_id": "evt_" + "1" * 32})
        assert _assert_envelope(malformed, "invalid_id")["param"] == "profile_id"

        deleted = await client.call_tool("deleteProfile", {"profile_id": profile["id"]})
        assert deleted.is_error is False
        assert deleted.structured_content == {"status": "deleted"}
        assert orjson.loads(_text(deleted)) == {"status": "deleted"}

        with pytest.raises(MCPError) as raised:
            await client.call_tool("noSuchTool", {})
        assert raised.value.error.code == -32602


async def _list_pages(api: Any, user: Any, *, modern: bool, path: str = ALL
                      ) -> list[dict[str, Any]]:
    """Every tools/list page, following nextCursor, in a modern or a handshake-era request."""
    pages: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    while True:
        legacy: dict[str, Any] = {
            "body": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params},
            "headers": {"MCP-Protocol-Version": "2025-11-25"},
        }
        request = _modern("tools/list", params) if modern else legacy
        status, body, _ = await _post(api, user, request["body"], request["headers"], path)
        assert status == 200, body
        pages.append(body["result"])
        if "nextCursor" not in body["result"]:
            return pages
        params = {"cursor": body["result"]["nextCursor"]}


async def test_tools_mirror_the_registry(api: Any, user: Any) -> None:
    """Each tool as the registry states it, compacted (mcp_bridge/schemas.py; what is
    left out and what is kept is tests/mcp_bridge/test_mcp_toolsets.py's)."""
    tools = [tool for page in await _list_pages(api, user, modern=True) for tool in page["tools"]]
    for tool, op in zip(tools, OPERATIONS.values(), strict=True):
        output = tool.pop("outputSchema")
        description = tool.pop("description")
        assert description.startswith(op.mcp.description)
        assert tool == {
            "name": op.name,
            "title": op.mcp.title,
            "inputSchema": compact(without_patterns(input_schema(op))),
            "annotations": tool_annotations(op),
        }
        if op.resource is not None:
            # `fields` on every tool that answers a resource; a list tool's description
            # says how to ask for less.
            assert tool["inputSchema"]["properties"]["fields"]["type"] == "array"
            if op.resource.page:
                assert "`fields`" in description and "`limit`" in description
        if op.no_body_status is None:
            assert op.response_schema is not None
            assert output == compact(listed_output_schema(op))  # type: ignore[arg-type]
        else:
            assert output["properties"]["status"]["const"] == op.no_body_status


@pytest.mark.parametrize("modern", [True, False])
async def test_tools_list_is_one_page(api: Any, user: Any, modern: bool) -> None:
    pages = await _list_pages(api, user, modern=modern)
    assert len(pages) == 1 and "nextCursor" not in pages[0]
    assert [t["name"] for t in pages[0]["tools"]] == list(OPERATIONS)
    # What an agent host holds in its context for the whole catalogue.
    size = len(orjson.dumps(pages[0]["tools"]))
    assert size < MAX_BYTES_PER_TOOL * len(OPERATIONS), size
    page = pages[0]
    if modern:
        assert page["resultType"] == "complete"
        assert page["ttlMs"] >= 0 and page["cacheScope"] == "public"
        assert page["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "kalends"
    else:
        assert {"resultType", "ttlMs", "cacheScope"}.isdisjoint(page)


def _listing_all(page_size: int) -> Catalogue:
    """The catalogue a `?toolsets=all` request is listed, chosen as the route chooses it."""
    return Catalogues(OPERATIONS, page_size).select(CIMultiDict(), MultiDict(toolsets="all"))


def test_cursors_page_a_catalogue_larger_than_a_page() -> None:
    catalogue = _listing_all(page_size=20)
    names: list[str] = []
    params: dict[str, Any] = {}
    while True:
        page = list_page(catalogue, params)
        assert len(page["tools"]) <= 20
        names += [t["name"] for t in page["tools"]]
        if "nextCursor" not in page:
            break
        params = {"cursor": page["nextCursor"]}
    assert names == list(OPERATIONS) and len(catalogue.cursors) >= 2

    cursor = catalogue.cursors[0]
    # White-box forgeries of the cursor's "stamp:page": only issued cursors are accepted.
    stamp, _, _ = base64.urlsafe_b64decode(cursor + "==").decode().partition(":")

    def forge(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    for bad in ["", "garbage!", cursor[:-2], cursor + "=", forge(f"{stamp}:0"),
                forge(f"{stamp}:01"), forge(f"{stamp}:100000"), forge("0123456789abcdef:1"),
                42, [cursor]]:
        with pytest.raises(RpcError) as raised:
            list_page(catalogue, {"cursor": bad})
        assert raised.value.code == -32602


async def test_invalid_cursors_are_invalid_params(api: Any, user: Any) -> None:
    cursor = _listing_all(page_size=20).cursors[0]
    for bad in ["", "garbage!", cursor, 42, [cursor]]:
        status, body = await _rpc(api, user, _modern("tools/list", {"cursor": bad}))
        _assert_rpc_error(status, body, 400, -32602)
        assert body["id"] == 7


async def test_discover(api: Any, user: Any) -> None:
    status, body = await _rpc(api, user, _modern("server/discover"))
    assert status == 200, body
    result = body["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [MODERN, "2025-11-25", "2025-06-18", "2025-03-26"]
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "kalends"
    assert isinstance(result["ttlMs"], int) and result["cacheScope"] == "public"
    assert result["instructions"]


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (_modern("tools/list", Mcp_Method="prompts/list"), -32020),
        (_modern("tools/list", Mcp_Method="TOOLS/LIST"), -32020),
        (_modern("tools/call", {"name": "listOrganizations"}, Mcp_Name="listProfiles"), -32020),
        (_modern("tools/list", MCP_Protocol_Version="2025-11-25"), -32020),
        (_modern("server/discover", {"_meta": _meta("1999-01-01")}), -32020),
        (
            _modern(
                "server/discover", {"_meta": _meta("1999-01-01")}, MCP_Protocol_Version="1999-01-01"
            ),
            -32022,
        ),
        (_modern("server/discover", {"_meta": {}}), -32602),
        (_modern("tools/list", {"_meta": None}), -32602),
        (_modern("tools/call", {"name": "nope", "arguments": {}}), -32602),
        (_modern("tools/call", {"name": "listOrganizations", "arguments": []}), -32602),
        (_modern("initialize"), -32601),
        (_modern("ping"), -32601),
    ],
    ids=[
        "method-mismatch",
        "method-case",
        "name-mismatch",
        "version-header-mismatch",
        "meta-version-mismatch",
        "unsupported-version",
        "meta-missing-fields",
        "meta-null",
        "unknown-tool",
        "arguments-not-object",
        "initialize-is-legacy",
        "ping-is-legacy",
    ],
)
async def test_modern_protocol_errors(
    api: Any, user: Any, request_: dict[str, Any], code: int
) -> None:
    status, body = await _rpc(api, user, request_)
    error = _assert_rpc_error(status, body, 404 if code == -32601 else 400, code)
    assert body["id"] == 7
    if code == -32022:
        assert error["data"] == {
            "supported": [MODERN, "2025-11-25", "2025-06-18", "2025-03-26"],
            "requested": "1999-01-01",
        }


async def test_missing_routing_headers_are_header_mismatch(api: Any, user: Any) -> None:
    for dropped in ("Mcp-Method", "MCP-Protocol-Version"):
        request = _modern("tools/list")
        del request["headers"][dropped]
        _assert_rpc_error(*await _rpc(api, user, request), 400, -32020)
    request = _modern("tools/call", {"name": "listOrganizations"})
    del request["headers"]["Mcp-Name"]
    _assert_rpc_error(*await _rpc(api, user, request), 400, -32020)


async def test_header_values_are_trimmed_and_base64_decoded(api: Any, user: Any) -> None:
    encoded = "=?base64?" + base64.b64encode(b"getContext").decode() + "?="
    for name in ("  getContext  ", encoded):
        request = _modern("tools/call", {"name": "getContext"}, Mcp_Name=name)
        status, body = await _rpc(api, user, request)
        assert status == 200 and body["result"]["isError"] is False, body
    request = _modern("tools/call", {"name": "getContext"}, Mcp_Name="=?base64?bm9wZQ?=")
    _assert_rpc_error(*await _rpc(api, user, request), 400, -32020)


@pytest.mark.parametrize("offered", ["2025-11-25", "2025-06-18", "2025-03-26"])
async def test_legacy_handshake_echoes_supported_versions(
    api: Any, user: Any, offered: str
) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": "a",
        "method": "initialize",
        "params": {
            "protocolVersion": offered,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    status, body, headers = await _post(api, user, init)
    assert status == 200 and body["id"] == "a", body
    assert body["result"]["protocolVersion"] == offered
    assert body["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert body["result"]["serverInfo"]["name"] == "kalends"
    assert "Mcp-Session-Id" not in headers

    later = {"MCP-Protocol-Version": offered}
    status, body, _ = await _post(
        api, user, {"jsonrpc": "2.0", "method": "notifications/initialized"}, later
    )
    assert status == 202 and body is None
    status, body, _ = await _post(api, user, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, later)
    assert (status, body) == (200, {"jsonrpc": "2.0", "id": 2, "result": {}})


async def test_legacy_handshake_offers_latest_for_unknown_versions(api: Any, user: Any) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2024-11-05",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    _, body, _ = await _post(api, user, init)
    assert body["result"]["protocolVersion"] == "2025-11-25"


async def test_legacy_errors_answer_200(api: Any, user: Any) -> None:
    later = {"MCP-Protocol-Version": "2025-06-18"}
    status, body, _ = await _post(
        api, user, {"jsonrpc": "2.0", "id": 3, "method": "server/discover"}, later
    )
    _assert_rpc_error(status, body, 200, -32601)
    call = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope"}}
    status, body, _ = await _post(api, user, call, later)
    _assert_rpc_error(status, body, 200, -32602)


async def test_tool_errors_carry_the_request_id(api: Any, user: Any) -> None:
    request = _modern(
        "tools/call", {"name": "getEvent", "arguments": {"event_id": "evt_" + "0" * 32}}
    )
    request["headers"]["X-Request-Id"] = "mcp-trace-1"
    status, body, headers = await _post(api, user, request["body"], request["headers"])
    assert status == 200 and headers["X-Request-Id"] == "mcp-trace-1"
    result = body["result"]
    assert result["isError"] is True and result["resultType"] == "complete"
    assert "structuredContent" not in result
    [block] = result["content"]
    assert orjson.loads(block["text"])["error"]["request_id"] == "mcp-trace-1"


@pytest.mark.parametrize("path", ["/mcp", "/mcp-developer"])
@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_only_post(api: Any, user: Any, bearer: Any, path: str, method: str) -> None:
    status, body, headers = await api.request(method, path, caller_on(path, user, bearer))
    _assert_http_refusal(status, body, 405, "method_not_allowed", -32600)
    assert headers["Allow"] == "POST"


async def test_batches_and_bad_json_are_refused(api: Any, user: Any) -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    status, body, _ = await _post(api, user, batch)
    _assert_rpc_error(status, body, 400, -32600)
    assert body["id"] is None
    status, body, _ = await _post(api, user, b"{not json")
    _assert_rpc_error(status, body, 400, -32700)
    for bad in (
        {"id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]},
    ):
        _assert_rpc_error(*(await _post(api, user, bad))[:2], 400, -32600)


async def test_notifications_are_accepted(api: Any, user: Any) -> None:
    status, body, _ = await _post(
        api,
        user,
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
    )
    assert status == 202 and body is None


async def test_body_must_be_json(api: Any, user: Any) -> None:
    status, body, _ = await _post(api, user, b"{}", {"Content-Type": "text/plain"})
    _assert_http_refusal(status, body, 415, "unsupported_media_type", -32600)


@pytest.mark.parametrize("path", ["/mcp", "/mcp-developer"])
async def test_foreign_origins_are_forbidden(
    api: Any, user: Any, bearer: Any, path: str
) -> None:
    for origin in ("http://evil.example.com", "null", "https://localhost.evil.example"):
        status, body, _ = await _post(
            api,
            caller_on(path, user, bearer),
            _modern("server/discover")["body"],
            {**_modern("server/discover")["headers"], "Origin": origin},
            path=path,
        )
        _assert_rpc_error(status, body, 403, -32600)


async def test_loopback_origins_are_allowed(api: Any, user: Any) -> None:
    request = _modern("server/discover")
    for origin in ("http://localhost:6274", "http://127.0.0.1", "http://[::1]:9000"):
        status, body, _ = await _post(
            api, user, request["body"], {**request["headers"], "Origin": origin}
        )
        assert status == 200, body


async def test_oauth_route_refuses_an_api_key(live_server: Any, api: Any, user: Any) -> None:
    """An API key is not an access token: /mcp challenges it, pointing at its metadata."""
    request = _modern("server/discover")
    status, body, headers = await _post(api, user, request["body"], request["headers"], path="/mcp")
    error = _assert_http_refusal(status, body, 401, "not_authenticated", -32001)
    assert "/mcp-developer" in error["message"]  # where API keys belong
    metadata_url = f"{live_server.url}/.well-known/oauth-protected-resource/mcp"
    assert headers["WWW-Authenticate"].startswith(
        f'Bearer realm="kalends", resource_metadata="{metadata_url}", '
        'scope="kalends:read kalends:write", error="invalid_token"')
    status, metadata, _ = await api.get(metadata_url.removeprefix(live_server.url))
    assert status == 200
    assert metadata["resource"] == f"{live_server.url}/mcp"
    assert metadata["authorization_servers"] == [f"{live_server.url}/"]


async def test_the_sdk_shows_why_mcp_refuses(live_server: Any) -> None:
    """The official SDK surfaces the JSON-RPC error's message, not only "Server
    returned an error response"."""
    async with httpx2.AsyncClient() as http:
        # The SDK's task group wraps the error.
        with pytest.RaisesGroup(MCPError, flatten_subgroups=True) as raised:
            async with Client(streamable_http_client(live_server.url + "/mcp", http_client=http),
                              cache=None) as client:
                await client.list_tools()
    [error] = raised.value.exceptions
    while isinstance(error, BaseExceptionGroup):
        [error] = error.exceptions
    assert isinstance(error, MCPError)
    assert "OAuth access token" in error.error.message, error.error
    assert error.error.code == -32001


async def test_developer_route_needs_a_valid_key(live_server: Any, api: Any) -> None:
    request = _modern("server/discover")
    for auth in ({}, {"Authorization": "Bearer kal_unknown"}):
        status, body, headers = await _post(
            api, None, request["body"], {**request["headers"], **auth}
        )
        _assert_http_refusal(status, body, 401, "not_authenticated", -32001)
        assert headers["WWW-Authenticate"].startswith("Bearer")
    made = live_server.admin(accounts.create_consumer, "mcp-" + secrets.token_hex(4))
    status, body, _ = await _post(
        api,
        None,
        request["body"],
        {**request["headers"], "Authorization": "Bearer " + made["api_key"]},
    )
    _assert_http_refusal(status, body, 403, "consumer_not_claimed", -32001)


async def test_arguments_may_be_omitted(api: Any, user: Any) -> None:
    status, body = await _rpc(api, user, _modern("tools/call", {"name": "getContext"}))
    assert status == 200 and body["result"]["isError"] is False, body


async def test_a_bug_is_an_internal_error_result(
    api: Any, user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr("registry.calls.call_flat", broken)
    status, body = await _rpc(api, user, _modern("tools/call", {"name": "getContext"}))
    assert status == 200, body
    assert body["result"]["isError"] is True
    error = orjson.loads(body["result"]["content"][0]["text"])["error"]
    assert (error["type"], error["code"]) == ("api_error", "internal_error")
    assert "secret" not in body["result"]["content"][0]["text"]


CALENDAR_ERA_TOOLS = {
    "listCalendars", "getCalendar", "listCalendarEvents", "createCalendarEvent", "getCalendarEvent",
    "updateCalendarEvent", "deleteCalendarEvent", "listSubscriptions", "createSubscription",
    "getSubscription", "updateSubscription", "deleteSubscription", "listFollows", "createFollow",
    "deleteFollow", "listProfileFollowers", "search", "getAgenda",
}


@pytest.mark.parametrize("modern", [True, False])
async def test_calendar_subscription_follow_search_and_agenda_tools_are_listed(
    api: Any, user: Any, modern: bool
) -> None:
    """By name, independently of the registry: a tool dropped from it would still be caught."""
    pages = await _list_pages(api, user, modern=modern)
    listed = {t["name"] for page in pages for t in page["tools"]}
    assert listed >= CALENDAR_ERA_TOOLS, sorted(CALENDAR_ERA_TOOLS - listed)
