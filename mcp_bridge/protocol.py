"""Which MCP era a message speaks, and the per-request checks of the stateless era.

Modern (2026-07-28) requests carry their version in `params._meta` and mirror
routing fields into headers; legacy requests (2025-03-26 .. 2025-11-25) rely
on the `initialize` handshake. A server may serve both on one endpoint
(versioning.mdx, "Backward Compatibility"): a request is modern when its
`_meta` names a protocol version or its MCP-Protocol-Version header is not a
handshake-era version, as the SDKs route it.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from multidict import CIMultiDictProxy

from mcp_bridge.jsonrpc import INVALID_PARAMS, Message, RpcError

MODERN_VERSION = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
SUPPORTED_VERSIONS = (MODERN_VERSION, *LEGACY_VERSIONS)

HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"

# The params field each name-bearing method mirrors into Mcp-Name.
_NAME_SOURCES = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_BASE64_SENTINEL = re.compile(r"=\?base64\?(?P<payload>[A-Za-z0-9+/=]*)\?=")


def is_modern(headers: CIMultiDictProxy[str], message: Message) -> bool:
    meta = message.params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
        return True
    version = headers.get(VERSION_HEADER)
    return version is not None and version.strip() not in LEGACY_VERSIONS


def check_modern(headers: CIMultiDictProxy[str], message: Message) -> None:
    """Validate a modern request's `_meta` envelope and routing headers.

    Order follows the MCP specification and the SDKs: a malformed envelope is -32602
    (basic/index.mdx "Per-request protocol fields"), then headers that are
    missing or disagree with the body are -32020 (streamable-http.mdx "Server
    Validation"), and only then is the version itself judged (-32022), so a
    client that contradicts itself is told so rather than told its version is
    unsupported.
    """
    meta = message.params.get("_meta")
    if not isinstance(meta, dict):
        raise RpcError(INVALID_PARAMS, "params._meta is required and must be an object.")
    missing = [key for key in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if key not in meta]
    if missing:
        raise RpcError(INVALID_PARAMS, f"params._meta is missing {', '.join(missing)}.")
    if not isinstance(meta[META_CLIENT_CAPABILITIES], dict):
        raise RpcError(INVALID_PARAMS, f"{META_CLIENT_CAPABILITIES} must be an object.")
    version = meta[META_PROTOCOL_VERSION]

    _expect_header(headers, VERSION_HEADER, version)
    _expect_header(headers, METHOD_HEADER, message.method)
    source = _NAME_SOURCES.get(message.method)
    if source is not None and message.params.get(source) is not None:
        _expect_header(headers, NAME_HEADER, message.params[source], decode=True)

    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, f"{META_PROTOCOL_VERSION} must be a string.")
    if version != MODERN_VERSION:
        raise RpcError(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(SUPPORTED_VERSIONS), "requested": version},
        )


def _expect_header(
    headers: CIMultiDictProxy[str], name: str, body_value: Any, *, decode: bool = False
) -> None:
    values = headers.getall(name, [])
    if len(values) != 1:
        problem = "is missing" if not values else "appears more than once"
        raise RpcError(HEADER_MISMATCH, f"Header mismatch: {name} {problem}.")
    # HTTP field values exclude surrounding whitespace (RFC 9110 §5.5).
    trimmed = values[0].strip(" \t")
    value = _decode_header_value(trimmed) if decode else trimmed
    if value != body_value:
        raise RpcError(
            HEADER_MISMATCH,
            f"Header mismatch: {name} header value {values[0]!r} does not match the request body.",
        )


def _decode_header_value(value: str) -> str | None:
    """Undo the `=?base64?...?=` sentinel; a malformed one never matches anything."""
    match = _BASE64_SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match["payload"]
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
