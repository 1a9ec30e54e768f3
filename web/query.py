"""Query strings are UTF-8, percent-encoded: a bad escape is the client's error.

aiohttp (through yarl) decodes a query string leniently: `%ff` becomes U+FFFD and
`%zz` stays the three characters it is. A handler would then read a value the
client never sent (`?q=%ff%fe` would search for two replacement characters), so
every request's raw query string is checked once, before any handler reads it,
and a parameter whose name or value holds an escape that is not two hex digits,
or bytes that are not UTF-8, is `400 invalid_query_parameter` naming it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus, unquote_to_bytes

from aiohttp import web

from core.errors import ApiError

# A `%` not followed by two hex digits.
_BROKEN_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check(request: web.Request) -> None:
    """Raise `invalid_query_parameter` for the first parameter of the request's
    query string that is not UTF-8 percent-encoding."""
    # The hot path: without a `%` anywhere in the target there is no escape to
    # check, and the URL is not even split (most requests end here).
    if "%" not in request.raw_path:
        return
    if request.match_info.http_exception is not None:
        return  # no route reads it: the 404 or 405 stays what it is
    field = _bad_field(request.rel_url.raw_query_string)
    if field is not None:
        raise _error(field)


def _bad_field(raw_query: str) -> str | None:
    """The first `name=value` of `raw_query` (split as aiohttp splits it: on `&`)
    whose name or value does not decode, as sent."""
    if "%" not in raw_query:
        return None
    for field in raw_query.split("&"):
        if "%" in field and not _decodes(field):
            return field
    return None


def _decodes(text: str) -> bool:
    if _BROKEN_ESCAPE.search(text):
        return False
    try:
        # Name and value at once: the `=` between them, an ASCII byte, never
        # completes a sequence cut short, so the whole fails exactly when a part does.
        # (Raw bytes over 0x7F never get here: aiohttp's parser refuses them.)
        unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _error(field: str) -> ApiError:
    raw_name = field.partition("=")[0]
    name = _name(raw_name)
    return ApiError(
        "invalid_query_parameter",
        f"Query parameter `{name}` is not UTF-8 percent-encoded: each `%` must start an "
        "escape of two hex digits, and the escaped bytes must be UTF-8.",
        param=name, details={"value": field},
    )


def _name(raw_name: str) -> str:
    """The parameter's name as a handler would read it; as sent when it does not decode."""
    if not _decodes(raw_name):
        return raw_name
    return unquote_plus(raw_name, errors="strict")
