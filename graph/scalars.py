"""Scalars in the API's wire format (RFC 3339, UTC, `Z`, whole seconds; docs/http.md, "HTTP
conventions")."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NewType

import strawberry

from domain.times import utc_text


def _parse_timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


Timestamp = NewType("Timestamp", datetime)

# Registered through StrawberryConfig.scalar_map in graph/schema.py.
SCALARS: dict[object, Any] = {
    Timestamp: strawberry.scalar(
        name="Timestamp",
        description="An instant, RFC 3339 in UTC with `Z` and whole seconds.",
        serialize=utc_text,
        parse_value=_parse_timestamp,
    ),
}
