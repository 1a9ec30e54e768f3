"""Toolsets (docs/mcp.md, "Toolsets"): a request selects the tools it lists and may call.

The toolsets are the registry's (registry/toolsets.py): one per tag, and
`core`, the tools for a person's day, which a request that names no known toolset
gets. `all` names every toolset. A request narrows the catalogue with the header
`X-MCP-Toolsets: events,agenda` or the query `?toolsets=events,agenda`, and to
read-only tools (`readOnlyHint`) with `X-MCP-Readonly: true` or `?readonly=true`.
Names are trimmed and compared without case; unknown and empty ones are ignored.

A narrowing fails closed, whatever a proxy did to the headers on the way (one
that merges repeated headers joins their values with commas): neither a header
nor the URL can widen what the other narrowed.
- Read-only when any value of `X-MCP-Readonly` (every header sent, each split at
  commas) or of `readonly` is `true` or `1` (any case); any other value asks
  for nothing.
- Every `X-MCP-Toolsets` header and every `toolsets` parameter that names a known
  toolset narrows: the selection is the intersection of what each names (which
  may be empty: then no tool). One that names no known toolset narrows nothing,
  leaving the others to decide; when none names one, `core`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from multidict import MultiMapping

from registry.toolsets import ALL, CORE, in_core, toolset, toolsets

if TYPE_CHECKING:
    from registry import Operation

__all__ = ["ALL", "CORE", "Selection", "by_header", "describe", "requested", "toolset",
           "toolsets"]

TOOLSETS_HEADER = "X-MCP-Toolsets"
READONLY_HEADER = "X-MCP-Readonly"
TOOLSETS_QUERY = "toolsets"
READONLY_QUERY = "readonly"
_TRUE = frozenset({"true", "1"})


@dataclass(frozen=True)
class Selection:
    """The tools a request may see: those of `toolsets` (None: none named, so
    `core`), and only the read-only ones when `read_only`."""

    toolsets: frozenset[str] | None = None
    read_only: bool = False

    @property
    def named(self) -> frozenset[str]:
        """The toolsets selected, `core` when none was named."""
        return frozenset({CORE}) if self.toolsets is None else self.toolsets

    def admits(self, op: Operation) -> bool:
        if self.read_only and not op.mcp.read_only:
            return False
        named = self.named
        return toolset(op) in named or (CORE in named and in_core(op))


def requested(headers: MultiMapping[str], query: MultiMapping[str], known: Iterable[str]
              ) -> Selection:
    """The selection a request asks for, from its headers and query string."""
    every = frozenset(known)
    chosen: frozenset[str] | None = None
    for value in _values(headers, TOOLSETS_HEADER, query, TOOLSETS_QUERY):
        names = frozenset(n.strip().lower() for n in value.split(","))
        named = every if ALL in names else names & every
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
    """What the instructions say about toolsets, in three lines: what this request
    lists, every toolset with its tool count, and how to ask for others."""
    tagged = [ops for name, ops in every.items() if name != CORE]
    if set(every) <= selection.named:
        chosen = ALL
    else:
        chosen = ", ".join(n for n in every if n in selection.named) or "none"
    kind = "read-only tools" if selection.read_only else "tools"
    sets = ", ".join(f"{name} ({len(ops)})" for name, ops in every.items())
    return (
        f"Listed here: the {listed} {kind} of {chosen}.\n"
        f"Toolsets (tools in each): {sets}; {ALL} ({sum(len(ops) for ops in tagged)}).\n"
        f"To list others, add ?{TOOLSETS_QUERY}=events,rsvps (or ?{TOOLSETS_QUERY}={ALL}) "
        f"to the URL or send {TOOLSETS_HEADER}: events,rsvps; ?{READONLY_QUERY}=true "
        f"({READONLY_HEADER}: true) keeps the read-only ones. A tool not listed is unknown."
    )
