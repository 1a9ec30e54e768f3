"""Parameters shared by many operations."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from domain.pagination import DEFAULT_LIMIT, MAX_LIMIT
from domain.validation import id_of
from registry import Param

LIMIT = Param(
    "limit", "query", Annotated[int, Field(ge=1, le=MAX_LIMIT)],
    f"Page size, 1 to {MAX_LIMIT}.", default=DEFAULT_LIMIT,
)
CURSOR = Param(
    "cursor", "query", Annotated[str, Field(min_length=1, max_length=512)] | None,
    "Opaque cursor: `next_cursor` of the previous page.", default=None,
)
PAGE = (LIMIT, CURSOR)
PAGE_VARIABLES = "$limit: Int!, $cursor: String"
PAGE_ARGUMENTS = "limit: $limit, cursor: $cursor"


def path_id(name: str, prefix: str, what: str) -> Param:
    return Param(name, "path", id_of(prefix), f"The {what}'s ID ({prefix}_...).")


_COMMA_SEPARATED: list[Param] = []


def comma_separated(param: Param) -> Param:
    """`param`, marked as a list REST takes comma-separated: MCP takes a JSON array of
    strings for it too (docs/mcp.md, "Arguments")."""
    _COMMA_SEPARATED.append(param)
    return param


def is_comma_separated(param: Param) -> bool:
    # By identity: a Param's annotation may hold unhashable schema dicts.
    return any(param is marked for marked in _COMMA_SEPARATED)
