"""Toolsets: the registry's operations grouped so that an agent host loads only what
it needs (docs/mcp.md, "Toolsets"). Here, because both MCP (which lists them) and
`getContext` (which tells an agent they exist) need them.

A toolset is an operation's tag in lower case with `-` for spaces ("External
calendars" is `external-calendars`), a partition of the registry. `core` is the
tools for a person's day, across tags: what MCP lists when a client names no
toolset. `all` names every toolset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from registry import Operation

CORE = "core"
ALL = "all"
CORE_TOOLS = (
    "getContext", "getAgenda", "search", "getEvent", "listCalendars", "createCalendarEvent",
    "updateCalendarEvent", "deleteCalendarEvent", "getFreeBusy", "findMeetingTimes",
    "createEventRsvp", "createProfileEvent", "updateEvent", "cancelEvent", "rescheduleEvent",
    "updateEventOccurrence", "cancelEventOccurrence",
)
"""In registry order when listed; a name the registry does not hold (yet) is skipped."""


def toolset(op: Operation) -> str:
    """The toolset of the operation's tag."""
    return op.tag.lower().replace(" ", "-")


def in_core(op: Operation) -> bool:
    return op.name in CORE_TOOLS


def toolsets(operations: Iterable[Operation]) -> dict[str, tuple[Operation, ...]]:
    """Every toolset with its operations: `core` first, then the tags' in the order the
    registry first names them."""
    ops = tuple(operations)
    out: dict[str, list[Operation]] = {CORE: [op for op in ops if in_core(op)]}
    for op in ops:
        out.setdefault(toolset(op), []).append(op)
    return {name: tuple(members) for name, members in out.items()}
