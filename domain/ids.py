"""Prefixed resource identifiers: `prefix_` + 32 hex digits (docs/http.md, "HTTP conventions")."""

from __future__ import annotations

import re
import uuid

from core.errors import ApiError

PREFIXES = {
    "profile": "prf",
    "event": "evt",
    "series": "ser",
    "rsvp": "rsvp",
    "calendar": "cal",
    "calendar_event": "cev",
    "subscription": "sub",
    "follow": "fol",
    "organization": "org",
    "external_calendar": "xcal",
    "external_calendar_event": "xcev",
    "webhook_endpoint": "whe",
    # A webhook message: its `webhook-id` header (Standard Webhooks' msg_ IDs).
    "webhook_message": "msg",
    # Internal only: never accepted or shown by the public API.
    "user": "usr",
    "api_key": "key",
    # Operator-facing only (the CLI): a connected provider account.
    "external_account": "xac",
    # The built-in OAuth server's registered clients and grants.
    "oauth_client": "kcl",
    "oauth_grant": "ogr",
}


def pattern(prefix: str) -> str:
    """The JSON-Schema/OpenAPI pattern of an ID. IDs are matched case-insensitively,
    prefix included (docs/http.md, "HTTP conventions"); JSON Schema has no flags, so
    spell it out."""
    letters = "".join(f"[{c.lower()}{c.upper()}]" for c in prefix)
    return f"^{letters}_[0-9a-fA-F]{{32}}$"


_COMPILED = {p: re.compile(pattern(p)) for p in PREFIXES.values()}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def is_valid(prefix: str, value: object) -> bool:
    return isinstance(value, str) and _COMPILED[prefix].match(value) is not None


def parse(prefix: str, value: object, *, param: str) -> str:
    """Normalise an ID from a request, or raise `invalid_id` naming the parameter."""
    if not is_valid(prefix, value):
        raise ApiError(
            "invalid_id",
            f"`{param}` must be an ID of the form {prefix}_ followed by 32 hex digits.",
            param=param,
            details={"value": value},
        )
    assert isinstance(value, str)
    return value.lower()
