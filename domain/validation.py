"""Pydantic models are the one declaration of every request's shape; this module
turns their errors into the API's codes (docs/http.md, "Errors"), whichever transport asked."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

import rfc3986
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError
from rfc3986 import exceptions as uri_errors
from rfc3986 import validators as uri_validators

from core.errors import ApiError
from domain import ids

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

Location = Literal["body", "query", "path"]


class Body(BaseModel):
    """Base of request bodies: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @field_validator("*", mode="before", check_fields=False)
    @classmethod
    def _whole_numbers(cls, value: Any) -> Any:
        # JSON has one number type, and JSON Schema calls 5.0 an integer: strict
        # mode would refuse it for an int field. A float with a fraction still fails.
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            return int(value)
        return value

    @field_validator("*", mode="after", check_fields=False)
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        # PostgreSQL text cannot hold U+0000; refuse it here, for every body,
        # rather than fail on insert.
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and "\x00" in v for v in values):
            raise PydanticCustomError("nul_character", "must not contain the NUL character")
        return value


class _NotNull:
    """Validates `X | None` as `X` alone: see `Omittable`."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        schema = handler(source)
        if schema["type"] != "nullable":
            raise TypeError(f"Omittable[...] needs an optional type, not {source!r}")
        inner: CoreSchema = schema["schema"]
        return inner


Omittable = Annotated[T | None, _NotNull()]
"""A body field that may be omitted but not sent as `null` (docs/api-choices.md, opening
list: a PATCH's non-nullable fields): `is_private: Omittable[bool] = None`. Its default,
None, marks it omitted (`exclude_unset` leaves it out); an explicit `null` is refused
exactly as the type alone refuses it (`invalid_field`), and the documents describe the
type alone, with no `default: null` (registry.honest_defaults)."""


def id_of(prefix: str) -> Any:
    """An ID field of one prefix; a mismatch is `invalid_id`, never `invalid_field`."""

    def _check(value: object) -> str:
        if not ids.is_valid(prefix, value):
            raise PydanticCustomError(
                "invalid_id", "must be an ID of the form {prefix}_ followed by 32 hex digits",
                {"prefix": prefix},
            )
        assert isinstance(value, str)
        return value.lower()

    return Annotated[
        str,
        BeforeValidator(_check),
        WithJsonSchema({"type": "string", "pattern": ids.pattern(prefix)}),
    ]


# RFC 3986's grammar for an absolute http(s) URI with a host, as the documents
# advertise it (JSON Schema `pattern`). rfc3986 then checks what a pattern
# cannot: an IP literal's address, the port's range.
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[-A-Za-z0-9._~!$&'()*+,;=:@]|{_PCT})"
_USERINFO = rf"(?:(?:[-A-Za-z0-9._~!$&'()*+,;=:]|{_PCT})*@)?"
_HOST = rf"(?:(?:[-A-Za-z0-9._~!$&'()*+,;=]|{_PCT})+|\[[0-9A-Fa-f:.]+\])"
HTTP_URL_PATTERN = (
    rf"^https?://{_USERINFO}{_HOST}(?::[0-9]{{1,5}})?(?:/{_PCHAR}*)*"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?$"
)
_HTTP_URL = re.compile(HTTP_URL_PATTERN, re.ASCII)
_URI_CHECK = (
    uri_validators.Validator()
    .require_presence_of("scheme", "host")
    .check_validity_of("scheme", "userinfo", "host", "port", "path", "query", "fragment")
)


def _http_url(value: str) -> str:
    if _HTTP_URL.fullmatch(value):
        try:
            _URI_CHECK.validate(rfc3986.uri_reference(value))
        except uri_errors.ValidationError:
            pass
        else:
            return value
    raise PydanticCustomError(
        "invalid_url", "must be an absolute http or https URL with a host (RFC 3986)"
    )


_URL_MAX = 2048
Url = Annotated[
    str,
    StringConstraints(max_length=_URL_MAX),
    AfterValidator(_http_url),
    WithJsonSchema({"type": "string", "format": "uri", "maxLength": _URL_MAX,
                    "pattern": HTTP_URL_PATTERN}),
]
"""An absolute http(s) URL with a host, kept exactly as sent."""


def validate(model: type[M], data: Any, *, location: Location = "body") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _to_api_error(exc.errors(include_url=False), location) from None


def _to_api_error(errors: list[Any], location: Location) -> ApiError:
    # Report the most actionable problem first: unknown fields, then missing ones.
    order = {"extra_forbidden": 0, "missing": 1}
    err = min(errors, key=lambda e: order.get(e["type"], 2))
    param = ".".join(str(p) for p in err["loc"]) or None
    kind = err["type"]
    value = err.get("input")
    details = None if kind in ("missing", "extra_forbidden") else {"value": value}
    if kind == "invalid_id":
        return ApiError("invalid_id", f"`{param}` {err['msg']}.", param=param, details=details)
    if location != "body":
        return ApiError(
            "invalid_query_parameter" if location == "query" else "invalid_id",
            _query_message(kind, param, err["msg"]), param=param, details=details,
        )
    if kind == "extra_forbidden":
        return ApiError("unknown_field", f"Unknown field `{param}`.", param=param)
    if kind == "missing":
        return ApiError("missing_field", f"`{param}` is required.", param=param)
    return ApiError("invalid_field", f"`{param}`: {err['msg']}.", param=param, details=details)


def _query_message(kind: str, param: str | None, msg: str) -> str:
    if kind == "extra_forbidden":
        return f"Unknown query parameter `{param}`."
    if kind == "missing":
        return f"Query parameter `{param}` is required."
    return f"Query parameter `{param}`: {msg}."
