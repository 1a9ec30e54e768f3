"""The tool surface: one tool per registry operation, listed in pages, called flat
(arguments.py), narrowed to a request's toolsets (toolsets.py)."""

from __future__ import annotations

import base64
import copy
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from multidict import MultiMapping

import registry
from core.errors import ApiError, internal_error
from mcp_bridge import arguments as args
from mcp_bridge import schemas, toolsets
from mcp_bridge.jsonrpc import INVALID_PARAMS, RpcError
from mcp_bridge.toolsets import Selection
from registry import calls, narrow
from web.services import SERVICES

if TYPE_CHECKING:
    from domain.auth import Viewer
    from domain.ratelimit import Decision
    from registry import Operation

# The whole catalogue in one page: agent hosts commonly call tools/list once and
# ignore nextCursor (the official SDK's list_tools() returns one page), and would
# never see the tools past the first page. Cursors still work past this size.
PAGE_SIZE = 500

_log = logging.getLogger("kalends.mcp")


@dataclass(frozen=True)
class Catalogue:
    """The tools one selection lists, in registry order, and the cursors that page
    through them."""

    tools: tuple[dict[str, Any], ...]
    cursors: tuple[str, ...]
    """cursors[n] resumes the listing at page n + 1."""
    page_size: int
    names: frozenset[str]
    """The tools a call may name: those listed, and no other."""
    toolsets_note: str
    """What the instructions say about toolsets and this selection."""


class Catalogues:
    """Every selection's catalogue of one registry, each tool's entry built once."""

    # Selections are subsets of a dozen toolsets; past this many kept, the rarer
    # ones are built per request rather than held.
    _KEPT = 256

    def __init__(self, operations: Mapping[str, Operation], page_size: int = PAGE_SIZE) -> None:
        self._operations = tuple(operations.values())
        self._tools = {op.name: _tool(op) for op in self._operations}
        self._toolsets = toolsets.toolsets(self._operations)
        self._page_size = page_size
        self._kept: dict[Selection, Catalogue] = {}

    def select(self, headers: MultiMapping[str], query: MultiMapping[str]) -> Catalogue:
        """The catalogue a request asks for (toolsets.py says how)."""
        return self.get(toolsets.requested(headers, query, self._toolsets))

    def get(self, selection: Selection) -> Catalogue:
        catalogue = self._kept.get(selection)
        if catalogue is None:
            catalogue = self._build(selection)
            if len(self._kept) < self._KEPT:
                self._kept[selection] = catalogue
        return catalogue

    def _build(self, selection: Selection) -> Catalogue:
        tools = tuple(self._tools[op.name] for op in self._operations if selection.admits(op))
        # Cursors name the exact catalogue they page through, so one kept across a
        # deploy that changed the tools, or sent with another selection, is refused
        # rather than skipping or repeating.
        stamp = hashlib.sha256(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
        later_pages = range(1, -(-len(tools) // self._page_size))
        cursors = tuple(
            base64.urlsafe_b64encode(f"{stamp}:{page}".encode()).decode().rstrip("=")
            for page in later_pages
        )
        note = toolsets.describe(self._toolsets, selection, len(tools))
        return Catalogue(tools, cursors, self._page_size,
                         frozenset(t["name"] for t in tools), note)


def _tool(op: Operation) -> dict[str, Any]:
    tool = {
        "name": op.name,
        "title": op.mcp.title,
        "description": _description(op),
        "inputSchema": schemas.compact(schemas.without_patterns(input_schema(op))),
        "annotations": tool_annotations(op),
    }
    output = listed_output_schema(op)
    if output is not None:
        tool["outputSchema"] = schemas.compact(output)
    return tool


def tool_annotations(op: Operation) -> dict[str, Any]:
    """The registry's hints less what says nothing (tools.mdx, ToolAnnotations): the
    title, which the tool's own `title` gives; readOnlyHint and idempotentHint when
    false, their defaults; destructiveHint on a read-only tool, where it has no
    meaning. destructiveHint stays on every other tool, and openWorldHint (false,
    against a default of true) everywhere."""
    hints = {k: v for k, v in op.mcp.annotations.items() if k != "title"}
    for key in ("readOnlyHint", "idempotentHint"):
        if hints.get(key) is False:
            del hints[key]
    if op.mcp.read_only:
        hints.pop("destructiveHint", None)
    return hints


def _description(op: Operation) -> str:
    found = op.resource
    if found is None or not found.page:
        # A single resource's `fields` says what it does in its own description.
        return op.mcp.description
    return f"{op.mcp.description} Read less with `fields` and a smaller `limit`."


def _example(found: narrow.Resource) -> str:
    """A `fields` value to show: the resource's title or name, and a time if it has one."""
    named = [f for f in ("title", "name", "display_name") if f in found.fields][:1]
    timed = [f for f in ("start_time", "created_at") if f in found.fields][:1]
    return orjson.dumps(named + timed or list(found.fields[1:2])).decode()


def input_schema(op: Operation) -> dict[str, Any]:
    """The registry's flat arguments, a JSON array of strings allowed for a list REST
    takes comma-separated, and `fields` for a tool that answers a resource."""
    schema = op.tool_input_schema()
    for name in args.comma_separated(op):
        schema["properties"][name] = _or_array(schema["properties"][name])
    found = args.resource(op)
    if found is not None:
        # No enum of the names: it would cost more than the invalid_field error that
        # lists them, once, to the agent that needs them.
        schema["properties"]["fields"] = {
            "type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True,
            "description": f"Only these top-level fields (and {found.key}), e.g. "
                           f"{_example(found)}.",
        }
    return schema


def _or_array(prop: dict[str, Any]) -> dict[str, Any]:
    """A string argument's schema that takes an array of strings too."""
    branches = prop.get("anyOf") or [{k: v for k, v in prop.items() if k != "description"}]
    array = {"type": "array", "items": {"type": "string"}}
    nulls = [b for b in branches if b == {"type": "null"}]
    others = [b for b in branches if b != {"type": "null"}]
    out = {k: v for k, v in prop.items() if k in ("default", "description")}
    return {"anyOf": [*others, array, *nulls], **out}


def output_schema(op: Operation) -> dict[str, Any] | None:
    """What `structuredContent` holds on success: the REST body, with the local times
    of a resource whose type has them, or the no-body status. A resource only requires
    its `id`, so that an answer narrowed by `fields` conforms."""
    if op.no_body_status is not None:
        return {
            "type": "object",
            "properties": {"status": {"type": "string", "const": op.no_body_status}},
            "required": ["status"],
            "additionalProperties": False,
        }
    # The REST response schema, which the schemathesis suite holds REST bodies to.
    found = args.resource(op)
    if found is None or op.response_schema is None:
        return op.response_schema
    schema = copy.deepcopy(op.response_schema)
    target = schema["properties"]["data"]["items"] if found.page else schema
    target["required"] = [found.key]
    for name in found.fields:
        if name not in target["properties"]:  # a local time (arguments.resource)
            target["properties"][name] = {"type": ["string", "null"], "format": "date-time"}
    return schema


def listed_output_schema(op: Operation) -> dict[str, Any] | None:
    """What tools/list says `structuredContent` holds: `output_schema`, but of a
    resource only its key (`id`; an occurrence's `occurrence_id`), the one field every
    answer holds whatever `fields` asked.
    The others' names and types are the REST resource's (OpenAPI), and every answer
    shows them; stated here they took half of what an agent read before its first call
    (docs/mcp.md, "What tools/list says"). Objects' titles, which name OpenAPI's
    components, go too."""
    schema = output_schema(op)
    found = args.resource(op)
    if schema is None:
        return None
    if found is None:
        return schemas.untitled(schema)
    only_id = {"type": "object", "properties": {found.key: {"type": "string"}},
               "required": [found.key]}
    if not found.page:
        return only_id
    page = schemas.untitled(schema)
    page["properties"]["data"]["items"] = only_id
    return page


def list_page(catalogue: Catalogue, params: Mapping[str, Any]) -> dict[str, Any]:
    """A tools/list result without era-specific fields."""
    cursor = params.get("cursor")
    page = 0
    if cursor is not None:
        if cursor not in catalogue.cursors:
            # pagination.mdx: invalid cursors SHOULD be -32602.
            raise RpcError(
                INVALID_PARAMS,
                "Invalid cursor: pass back a nextCursor exactly as tools/list returned it, "
                "or list again from the start.",
            )
        page = catalogue.cursors.index(cursor) + 1
    start = page * catalogue.page_size
    result: dict[str, Any] = {
        "tools": list(catalogue.tools[start : start + catalogue.page_size])}
    if page < len(catalogue.cursors):
        result["nextCursor"] = catalogue.cursors[page]
    return result


async def call(
    app: web.Application, viewer: Viewer, catalogue: Catalogue, params: Mapping[str, Any],
    request_id: str, limit: Decision | None = None,
) -> dict[str, Any]:
    """A tools/call result; API errors, the rate limit's included, become `isError`
    results, as tools.mdx asks. A tool the catalogue does not list is unknown."""
    name = params.get("name")
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, "tools/call needs params.name, a string.")
    op = registry.OPERATIONS.get(name) if name in catalogue.names else None
    if op is None:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "params.arguments must be an object.")
    try:
        if limit is not None:
            limit.enforce()
        arguments, fields = args.shaped(op, arguments)
        body = await calls.call_flat(app[SERVICES], viewer, op, arguments, request_id, fields)
        result = _tool_result(body if body is not None else {"status": op.no_body_status})
        if size(result) > MAX_RESULT_CHARACTERS:
            result = await _cut(app, viewer, op, arguments, request_id, fields, body)
    except ApiError as exc:
        return _error_result(exc.envelope(request_id))
    except Exception:
        _log.exception("tool failed", extra={"operation": name, "request_id": request_id})
        return _error_result(internal_error().envelope(request_id))
    return result


MAX_RESULT_CHARACTERS = 100_000
"""What one tool result may hold: its text blocks and its structuredContent as compact
JSON, together (docs/mcp.md, "Results")."""


def size(result: dict[str, Any]) -> int:
    """The characters a result holds, as sent: text blocks and compact structuredContent."""
    text = sum(len(block["text"]) for block in result["content"] if block["type"] == "text")
    if "structuredContent" not in result:
        return text
    return text + len(orjson.dumps(result["structuredContent"]).decode())


async def _cut(app: web.Application, viewer: Viewer, op: Operation, arguments: dict[str, Any],
               request_id: str, fields: frozenset[str] | None, body: Any) -> dict[str, Any]:
    """A result within the bound: a page ends early at the last item that fits (asked
    again with that `limit`, so that its next_cursor resumes right after it: nothing
    skipped, nothing repeated); a single resource past it is `response_too_large`."""
    found = op.resource
    pageable = found is not None and found.page and "limit" in op.query_model.model_fields
    items = body.get("data") if pageable and isinstance(body, dict) else None
    fits = _items_that_fit(body, items) if items else 0
    while fits > 0:
        smaller = await calls.call_flat(app[SERVICES], viewer, op, {**arguments, "limit": fits},
                                        request_id, fields)
        result = _tool_result(smaller)
        if size(result) <= MAX_RESULT_CHARACTERS:
            return result
        fits -= 1  # the items changed meanwhile: one fewer
    example = _example(found) if found is not None else "fewer fields"
    raise ApiError(
        "response_too_large",
        f"The answer would hold more than the {MAX_RESULT_CHARACTERS:,} characters a tool "
        f"result may hold. Ask for less: `fields` (e.g. {example}) keeps only those fields"
        + (", and a smaller `limit` fewer items." if pageable else "."),
        param="fields" if found is not None else None)


def _items_that_fit(body: dict[str, Any], items: list[Any]) -> int:
    """How many of the page's first items fit in a result, its cursor included."""
    cursor = body.get("next_cursor") or "x" * 200
    empty = _tool_result({**body, "data": [], "has_more": True, "next_cursor": cursor})
    used = size(empty)
    for n, item in enumerate(items):
        # Each item twice (text block, structuredContent), with its comma.
        used += 2 * (len(orjson.dumps(item).decode()) + (1 if n else 0))
        if used > MAX_RESULT_CHARACTERS:
            return n
    return len(items)


def _tool_result(structured: dict[str, Any]) -> dict[str, Any]:
    """A success: the body as structuredContent and as the one text block."""
    return {
        "content": [{"type": "text", "text": orjson.dumps(structured).decode()}],
        "structuredContent": structured,
        "isError": False,
    }


def _error_result(envelope: dict[str, Any]) -> dict[str, Any]:
    """An error: the envelope as the one text block, and no structuredContent, which
    SDKs check against the tool's outputSchema even on errors (the TypeScript SDK threw
    -32602 where the agent should have read the error's code)."""
    return {"content": [{"type": "text", "text": orjson.dumps(envelope).decode()}],
            "isError": True}
