"""JSON-RPC 2.0 framing: one message in, one response out, nothing MCP-specific."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

RequestId = str | int


class RpcError(Exception):
    """A JSON-RPC error response; `data` is sent only when it is not None."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


@dataclass(frozen=True)
class Message:
    """A request (with `id`) or a notification (`id` is None)."""

    method: str
    params: dict[str, Any]
    id: RequestId | None


def parse(body: bytes) -> Message:
    """Decode one request or notification; batches and responses are refused."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RpcError(PARSE_ERROR, "Parse error: the body is not valid JSON.") from exc
    if isinstance(raw, list):
        raise RpcError(INVALID_REQUEST, "Batches are not supported: send one message per POST.")
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
        raise RpcError(
            INVALID_REQUEST, 'The body must be one JSON-RPC 2.0 object ("jsonrpc": "2.0")'
        )
    method = raw.get("method")
    if not isinstance(method, str):
        raise RpcError(INVALID_REQUEST, "Only requests and notifications are accepted: no method.")
    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise RpcError(INVALID_REQUEST, "params must be an object.")
    if "id" not in raw:
        return Message(method, params, None)
    request_id = raw["id"]
    # bool is an int subclass, and MCP forbids null ids.
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        raise RpcError(INVALID_REQUEST, "id must be a string or an integer.")
    return Message(method, params, request_id)


def result(request_id: RequestId, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: RequestId | None, exc: RpcError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        body["data"] = exc.data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}
