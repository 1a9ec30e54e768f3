"""The one typed error every layer raises, and the catalogue of its codes.

Domain modules raise `ApiError`; the REST bridge renders it as the error
envelope (docs/http.md, "Errors"), the MCP bridge as an `isError` tool result, and GraphQL
carries it in `extensions` (graphql-core copies `original_error.extensions`).
"""

from __future__ import annotations

from typing import Any

import orjson

# code -> (type, HTTP status). docs/http.md, "Errors": status follows the type, with the
# listed exceptions spelled out here so no transport decides it.
_CODES: dict[str, tuple[str, int]] = {
    "invalid_json": ("invalid_request_error", 400),
    "unknown_field": ("invalid_request_error", 400),
    "missing_field": ("invalid_request_error", 400),
    "invalid_field": ("invalid_request_error", 400),
    "field_dependency": ("invalid_request_error", 400),
    "invalid_id": ("invalid_request_error", 400),
    "invalid_query_parameter": ("invalid_request_error", 400),
    "invalid_cursor": ("invalid_request_error", 400),
    "invalid_expand": ("invalid_request_error", 400),
    "invalid_idempotency_key": ("invalid_request_error", 400),
    "invalid_timezone": ("invalid_request_error", 400),
    "invalid_time_format": ("invalid_request_error", 400),
    "timezone_offset_mismatch": ("invalid_request_error", 400),
    "nonexistent_local_time": ("invalid_request_error", 400),
    "invalid_time_range": ("invalid_request_error", 400),
    "reserved_slug": ("invalid_request_error", 400),
    "invalid_recurrence_rule": ("invalid_request_error", 400),
    "multiple_attendees_not_allowed": ("invalid_request_error", 400),
    "agenda_window_out_of_range": ("invalid_request_error", 400),
    # A count or summary that would pass the request's expansion budget: exact or
    # this, never a smaller number (GraphQL only; docs/api-choices.md, "Bounded work").
    "expansion_limit": ("invalid_request_error", 400),
    "payload_too_large": ("invalid_request_error", 413),
    "response_too_large": ("invalid_request_error", 400),
    "unsupported_media_type": ("invalid_request_error", 415),
    "method_not_allowed": ("invalid_request_error", 405),
    "header_too_large": ("invalid_request_error", 431),
    "not_authenticated": ("authentication_error", 401),
    "consumer_not_claimed": ("permission_error", 403),
    "forbidden": ("permission_error", 403),
    "resource_not_found": ("not_found_error", 404),
    "route_not_found": ("not_found_error", 404),
    "conflict": ("conflict_error", 409),
    "event_cancelled": ("conflict_error", 409),
    # One occurrence of a recurring event (docs/occurrences.md, "Errors").
    "occurrence_cancelled": ("conflict_error", 409),
    "too_many_exceptions": ("conflict_error", 409),
    "capacity_reached": ("conflict_error", 409),
    "subscription_cleanup_in_progress": ("conflict_error", 409),
    "calendar_event_read_only": ("conflict_error", 409),
    "rate_limit_exceeded": ("rate_limit_error", 429),
    "internal_error": ("api_error", 500),
    "service_unavailable": ("service_unavailable", 503),
}

ERROR_TYPES = sorted({t for t, _ in _CODES.values()})
ERROR_CODES = sorted(_CODES)

# details holds only these string properties and these string arrays (docs/http.md, "Errors").
_DETAIL_STRINGS = frozenset({"value", "expected_offset", "gap_from", "gap_to", "start", "end"})
_DETAIL_ARRAYS = frozenset({"expected_shapes", "valid_offsets"})


class ApiError(Exception):
    """A broken rule, with everything a client needs to act on it."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        challenge: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.type, self.status = _CODES[code]
        self.code = code
        self.message = message
        self.param = param
        self.details = _clean_details(details) if details else None
        self.retry_after = retry_after
        """Seconds, for the Retry-After header of 429 and 503 answers."""
        self.challenge = challenge
        """Parameters of the WWW-Authenticate Bearer challenge of a 401 or 403
        (RFC 6750 §3: error, scope, resource_metadata, ...)."""

    @property
    def extensions(self) -> dict[str, Any]:
        ext: dict[str, Any] = {"type": self.type, "code": self.code}
        if self.param is not None:
            ext["param"] = self.param
        if self.details:
            ext["details"] = self.details
        return ext

    def envelope(self, request_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"type": self.type, "code": self.code, "message": self.message}
        if self.param is not None:
            body["param"] = self.param
        if request_id is not None:
            body["request_id"] = request_id
        if self.details:
            body["details"] = self.details
        return {"error": body}

    def __repr__(self) -> str:
        return f"ApiError({self.code!r}, param={self.param!r})"


def _clean_details(details: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in details.items():
        if key in _DETAIL_STRINGS and value is not None:
            out[key] = _show_value(value)
        elif key in _DETAIL_ARRAYS and value is not None:
            out[key] = [str(v) for v in value]
    return out


def _show_value(value: Any) -> str:
    """A client's value as `details.value` shows it: a string as sent, anything
    else as JSON; long ones cut, since the client already has them."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = orjson.dumps(value).decode()
        except TypeError:
            text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def not_found(what: str = "resource", *, param: str | None = None) -> ApiError:
    return ApiError("resource_not_found", f"No such {what}.", param=param)


def forbidden(message: str = "Your role does not allow this change.") -> ApiError:
    return ApiError("forbidden", message)


def conflict(message: str, *, param: str | None = None) -> ApiError:
    return ApiError("conflict", message, param=param)


def internal_error() -> ApiError:
    """A bug: the details go to the log, never to the client."""
    return ApiError("internal_error", "Something went wrong on our side; it has been logged.")


class AdminError(Exception):
    """An operator mistake; the CLI prints it and exits non-zero."""
