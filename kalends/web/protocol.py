"""Requests that aiohttp's HTTP parser refuses, answered like every other error.

aiohttp 3 answers a request its parser refuses (a request line or a header over
8,190 bytes, a NUL in a header, a method that is not a token) by itself, before
any middleware runs: in `text/plain`, logged at error level with a traceback,
and absent from the access log and the metrics. It has no option for this
(aio-libs/aiohttp#3287; aiohttp 4 hands such requests to the middlewares, #12925),
so the connection protocol is subclassed to override one method, `handle_error`,
for those requests only. Applications opt in with `handler_args()`: connections
of other aiohttp servers in the same process (test fakes) are left as they were.
A request line or a header line over 8,190 bytes is `431 header_too_large`;
anything else the parser refuses is `400 invalid_json`.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from aiohttp import web, web_server
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from kalends.errors import ApiError
from kalends.web import metrics
from kalends.web.guard import log as access_log
from kalends.web.responses import error_response

LOG = logging.getLogger("kalends.http")
"""aiohttp's log for this application's connections (its own failures, at error
level); being this logger also marks a connection as this application's."""

# The parser's message can quote the whole offending line: the client has it already.
_MAX_DETAIL = 200


class _Protocol(RequestHandler):
    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if self.logger is not LOG or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        return _malformed(exc)


def _malformed(exc: HttpProcessingError) -> web.Response:
    """The envelope for a request that is not HTTP as RFC 9112 writes it, logged as
    one access line at info (the client's mistake) and counted."""
    request_id = "req_" + secrets.token_hex(12)  # the request's own header was not read
    error = _error(exc)
    response = error_response(error, request_id)
    response.headers["X-Request-Id"] = request_id
    response.force_close()  # where the next request would start is unknown
    metrics.observe_malformed(response.status)
    access_log.info("request", extra={"request_id": request_id, "status": response.status,
                                      "malformed": error.message})
    return response


def _error(exc: HttpProcessingError) -> ApiError:
    if isinstance(exc, LineTooLong):
        # 431 (RFC 6585). aiohttp's exception does not say whether the request line
        # or a header was too long (both limits are 8,190 bytes), so the message
        # names both, and one code covers both.
        limit = exc.args[1] if len(exc.args) > 1 else None
        shown = f"{limit:,}" if isinstance(limit, int) else str(limit)
        return ApiError("header_too_large",
                        f"A header line or the request line is longer than {shown} bytes "
                        "(the limit for each): send a shorter header or URL.")
    return ApiError("invalid_json", _why(exc))


def _why(exc: HttpProcessingError) -> str:
    detail = exc.message.strip().splitlines()[0].rstrip(":") if exc.message.strip() else ""
    detail = detail[:_MAX_DETAIL]
    return "The request is not well-formed HTTP" + (f": {detail}." if detail else ".")


def handler_args() -> dict[str, Any]:
    """The `handler_args` of an application whose malformed requests are answered
    here. aiohttp's server builds each connection's protocol from the name
    `RequestHandler` in `aiohttp.web_server`, with no parameter for it: that name
    is pointed at the subclass (idempotent), which behaves exactly as its parent
    for connections without this module's logger."""
    setattr(web_server, "RequestHandler", _Protocol)  # noqa: B010 (a module's name, on purpose)
    return {"logger": LOG}
