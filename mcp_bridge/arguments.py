"""A tool call's arguments as the registry takes them, and what its answer holds
(docs/mcp.md, "Arguments" and "Local times").

- A list REST takes comma-separated (`emails`, `type`, `calendar_ids`, `expand`)
  takes a JSON array of strings too; any other shape is `invalid_field`, whose
  message names both shapes.
- `fields` names the resource's top-level fields to answer, the local times
  among them. A field that only an expansion brings (`profile`, `rsvp_stats`,
  ...) is asked of `expand` too: no name is dropped silently.
- With no `fields`, an Event, CalendarEvent or occurrence comes whole, with its
  local times: the REST document narrowed to every field and those added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import registry
from core.errors import ApiError
from registry import narrow
from registry.operations.common import is_comma_separated

if TYPE_CHECKING:
    from registry import Operation

_EXPAND = "expand"
_RESOURCES: dict[str, narrow.Resource | None] = {}


def resource(op: Operation) -> narrow.Resource | None:
    """The resource an agent reads: the REST one, and the local times its GraphQL type
    has (after `registry.prepare`, which compiles the documents)."""
    if op.name in _RESOURCES:
        return _RESOURCES[op.name]
    found = op.resource
    if found is None or op.response_schema is None or not registry.NARROWED:
        return found  # not prepared yet: nothing kept
    found = narrow.with_local_times(found, op.response_schema, registry.NARROWED[0].schema)
    _RESOURCES[op.name] = found
    return found


def comma_separated(op: Operation) -> tuple[str, ...]:
    """The operation's arguments that REST takes as comma-separated lists."""
    return tuple(p.name for p in op.params if is_comma_separated(p))


def shaped(op: Operation, arguments: Mapping[str, Any]
           ) -> tuple[dict[str, Any], frozenset[str] | None]:
    """The arguments as the registry binds them, and the fields to read (None: the
    document as it is)."""
    out = dict(arguments)
    for name in comma_separated(op):
        if name in out:
            out[name] = _joined(name, out[name])
    found = resource(op)
    if found is None:
        return out, None
    if "fields" not in out:
        whole = op.resource is not None and found.fields == op.resource.fields
        return out, None if whole else frozenset(found.fields)
    fields = narrow.check(found, out.pop("fields"))
    _expand_named(op, found, fields, out)
    return out, fields


def _joined(name: str, value: Any) -> Any:
    """An array of strings as REST's comma-separated string; a string or null as sent."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    raise ApiError(
        "invalid_field",
        f"`{name}` takes an array of strings, [\"a\", \"b\"], or one comma-separated "
        "string, \"a,b\".", param=name, details={"value": value})


def _expand_named(op: Operation, found: narrow.Resource, fields: frozenset[str],
                  arguments: dict[str, Any]) -> None:
    """Ask `expand` for the expansions `fields` names, with those it asked already."""
    named = [f for f in found.fields if f in fields and f in found.conditional]
    if not named or _EXPAND not in op.query_model.model_fields:
        return
    asked = arguments.get(_EXPAND)
    current = asked.split(",") if isinstance(asked, str) and asked else []
    arguments[_EXPAND] = ",".join(dict.fromkeys([*current, *named]))
