"""Search: what a query may be, and how its text is read.

`q` is search-box text (web-search syntax: `"exact phrase"`, `or`, `-excluded`),
1 to 256 characters. Any such text is accepted: text with nothing searchable
in it (`&&&`) simply finds nothing. The last word also matches as a prefix
("yog" finds "yoga"), unless it is excluded (`-word`) or the text ends with a
closing quote, which asks for the phrase exactly.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ApiError
from db.search import KINDS

MAX_QUERY_LENGTH = 256


@dataclass(frozen=True)
class SearchQuery:
    text: str
    prefix: bool
    """Whether the last word matches as a prefix."""
    kinds: tuple[str, ...]

    @property
    def list_key(self) -> str:
        """Cursors are bound to one query: its kinds and its text."""
        return f"search:{','.join(self.kinds)}:{self.text}"


def split_types(value: str | None) -> dict[str, list[str] | None]:
    """The REST and MCP `type` parameter, `event,series`, as the GraphQL list;
    `parse` checks its entries."""
    return {"types": None if value is None else value.split(",")}


def parse(q: str, types: Sequence[str] | None) -> SearchQuery:
    if not 1 <= len(q) <= MAX_QUERY_LENGTH:
        raise ApiError(
            "invalid_query_parameter",
            f"Query parameter `q` must be 1 to {MAX_QUERY_LENGTH} characters.",
            param="q", details={"value": q},
        )
    text = _readable(q).strip()
    return SearchQuery(text=text, prefix=_last_word_is_prefix(text), kinds=_kinds(types))


def _readable(q: str) -> str:
    """Control characters (NUL among them, which PostgreSQL text cannot hold) and
    unpaired surrogates (not encodable) separate words, as a space would."""
    return "".join(" " if unicodedata.category(c) in ("Cc", "Cs") else c for c in q)


def _last_word_is_prefix(text: str) -> bool:
    words = text.split()
    return bool(words) and text[-1].isalnum() and not words[-1].startswith("-")


def _kinds(types: Sequence[str] | None) -> tuple[str, ...]:
    if types is None:
        return KINDS
    asked = [t.strip() for t in types]
    unknown = [t for t in asked if t not in KINDS]
    if unknown or not asked:
        shown = ",".join(types)
        raise ApiError(
            "invalid_query_parameter",
            f"Query parameter `type` is a comma-separated list of {', '.join(KINDS)}"
            + (f"; `{unknown[0]}` is none of them." if unknown and unknown[0] else "."),
            param="type", details={"value": shown},
        )
    return tuple(k for k in KINDS if k in asked)
