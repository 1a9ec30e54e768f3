"""Toolsets (contract §8): the registry's tags, so an agent host loads only what it needs.

A toolset is an operation's tag in lower case with `-` for spaces ("External
calendars" is `external-calendars`). A request narrows the catalogue with the
header `X-MCP-Toolsets: events,agenda` or the query `?toolsets=events,agenda`,
and to read-only tools (`readOnlyHint`) with `X-MCP-Readonly: true` or
`?readonly=true`. Names are trimmed and compared without case; unknown and empty
ones are ignored.

A narrowing fails closed, whatever a proxy did to the headers on the way (one
that merges repeated headers joins their values with commas): neither a header
nor the URL can widen what the other narrowed.
- Read-only when any value of `X-MCP-Readonly` (every header sent, each split at
  commas) or of `readonly` is `true` or `1` (any case); any other value asks
  for nothing.
- Every `X-MCP-Toolsets` header and every `toolsets` parameter that names a known
  toolset narrows: the selection is the intersection of what each names (which
  may be empty: then no tool). One that names no known toolset narrows nothing,
  leaving the others to decide; when none names one, every toolset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from multidict import MultiMapping

if TYPE_CHECKING:
    from kalends.registry import Operation

TOOLSETS_HEADER = "X-MCP-Toolsets"
READONLY_HEADER = "X-MCP-Readonly"
TOOLSETS_QUERY = "toolsets"
READONLY_QUERY = "readonly"
_TRUE = frozenset({"true", "1"})


@dataclass(frozen=True)
class Selection:
    """The tools a request may see: those of `toolsets` (None: every toolset),
    and only the read-only ones when `read_only`."""

    toolsets: frozenset[str] | None = None
    read_only: bool = False

    @property
    def narrowed(self) -> bool:
        return self.toolsets is not None or self.read_only

    def admits(self, op: Operation) -> bool:
        if self.read_only and not op.mcp.read_only:
            return False
        return self.toolsets is None or toolset(op) in self.toolsets


def toolset(op: Operation) -> str:
    return op.tag.lower().replace(" ", "-")


def toolsets(operations: Iterable[Operation]) -> dict[str, tuple[Operation, ...]]:
    """Every toolset, in the order the registry first names it, with its operations."""
    out: dict[str, list[Operation]] = {}
    for op in operations:
        out.setdefault(toolset(op), []).append(op)
    return {name: tuple(ops) for name, ops in out.items()}


def requested(headers: MultiMapping[str], query: MultiMapping[str], known: Iterable[str]
              ) -> Selection:
    """The selection a request asks for, from its headers and query string."""
    every = set(known)
    chosen: frozenset[str] | None = None
    for value in _values(headers, TOOLSETS_HEADER, query, TOOLSETS_QUERY):
        named = frozenset(n.strip().lower() for n in value.split(",")) & every
        if named:
            chosen = named if chosen is None else chosen & named
    read_only = any(
        part.strip().lower() in _TRUE
        for value in _values(headers, READONLY_HEADER, query, READONLY_QUERY)
        for part in value.split(","))
    return Selection(chosen, read_only)


def by_header(headers: MultiMapping[str]) -> bool:
    """Whether a request selects by header: its list differs from its URL's."""
    return TOOLSETS_HEADER in headers or READONLY_HEADER in headers


def _values(headers: MultiMapping[str], header: str, query: MultiMapping[str], parameter: str
            ) -> list[str]:
    """Every value of the header and of the query parameter, each as sent."""
    return [*headers.getall(header, []), *query.getall(parameter, [])]


def describe(every: Mapping[str, tuple[Operation, ...]], selection: Selection,
             listed: int) -> str:
    """What the instructions say about toolsets: every one with its tool count, how
    to select, and what this request selected."""
    sets = ", ".join(f"{name} ({len(ops)})" for name, ops in every.items())
    total = sum(len(ops) for ops in every.values())
    text = (
        f"Toolsets (tools in each; {total} in all): {sets}. To load fewer tools, select "
        f"toolsets with the header {TOOLSETS_HEADER}: events,agenda or the URL query "
        f"?{TOOLSETS_QUERY}=events,agenda, and read-only tools with {READONLY_HEADER}: true "
        f"or ?{READONLY_QUERY}=true; a tool outside the selection is an unknown tool."
    )
    if not selection.narrowed:
        return text + " Here, tools/list lists every tool."
    chosen = ", ".join(
        n for n in every if selection.toolsets is None or n in selection.toolsets) or "none"
    kind = "read-only tools" if selection.read_only else "tools"
    return text + f" Here, tools/list lists the {listed} {kind} of: {chosen}."
