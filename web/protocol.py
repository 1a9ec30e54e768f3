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

The same subclass closes a connection whose client has not sent a whole request
head within `HEAD_TIMEOUT` seconds (aiohttp has no read-headers timeout: a client
that sends half a head and stalls holds its connection, a task and a parser until
the keep-alive timeout, so a few hundred of them pile up unhindered). The clock
starts when the connection opens (nothing sent yet) and, on a kept-alive
connection, at the first byte of the next request's head; an idle kept-alive
connection with nothing sent stays governed by the keep-alive timeout. A head
sent behind a request still being answered (pipelined) is judged once that
answer is out, so a slow answer is never cut. One limit: a partial head that
arrives in the same read as the end of a request *body* cannot be told from the
body (the C parser exposes no state), so it is bounded by the keep-alive timeout,
as an idle kept-alive connection is, and gives a client nothing it lacked.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from aiohttp import web, web_server
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestHandler

from core.errors import ApiError
from web import metrics
from web.guard import log as access_log
from web.responses import error_response

LOG = logging.getLogger("kalends.http")
"""aiohttp's log for this application's connections (its own failures, at error
level); being this logger also marks a connection as this application's."""

HEAD_TIMEOUT = 10.0
"""Seconds a client has to send a whole request head, from the connection's opening
or from the first byte of the head. Read by `handler_args()`, when an application
is made: a test shortens it for its own server."""

# The parser's message can quote the whole offending line: the client has it already.
_MAX_DETAIL = 200
# How a bodiless request's head ends in a read that holds nothing after it (the
# parser takes a bare LF for CRLF, and skips empty lines between requests).
_HEAD_ENDS = (b"\n\r\n", b"\n\n")


class _Protocol(RequestHandler):
    __slots__ = ("_body", "_head_timeout", "_head_timer")

    def __init__(self, manager: web_server.Server, *, head_timeout: float | None = None,
                 **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._head_timeout = head_timeout
        """None: another server's connection, left as aiohttp makes it."""
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None
        """The body of the latest request whose head was read: bytes that arrive
        while it is still open are body, not a new head."""

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if self.logger is not LOG or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        return _malformed(exc)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._start_head_clock()  # nothing sent yet: the first head is due

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_head_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head_timeout is None:
            super().data_received(data)
            return
        # The parser counts each request whose head it has read (aiohttp's own
        # counter); its state inside a head is not exposed, so what a read held
        # is told from whether that count moved.
        heads = self._request_count
        super().data_received(data)
        if self._upgraded:
            self._stop_head_clock()  # a WebSocket now: no more request heads
        elif self._request_count != heads:
            self._stop_head_clock()
            self._body = self._messages[-1][1] if self._messages else None
            if self._body is EMPTY_PAYLOAD and not data.endswith(_HEAD_ENDS):
                self._start_head_clock()  # bytes after a bodiless request: the next head
        elif data and self._head_timer is None and (self._body is None or self._body.is_eof()):
            self._start_head_clock()  # no body is awaited: these bytes begin a head

    def _start_head_clock(self) -> None:
        if self._head_timeout is not None and self._head_timer is None:
            self._head_timer = self._loop.call_later(self._head_timeout, self._head_overdue)

    def _stop_head_clock(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self.transport is None:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            # A request is still being answered; the head was sent behind it, and
            # is judged once the answer is out (the answer is never cut).
            self._start_head_clock()
            return
        LOG.info("connection closed: no whole request head in time",
                 extra={"seconds": self._head_timeout, "peer": _peer(self.peername)})
        self.force_close()


def _peer(peername: object) -> str | None:
    return str(peername[0]) if isinstance(peername, tuple) and peername else None


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
    here, and whose clients have `HEAD_TIMEOUT` seconds for each request head
    (its value now: a test shortens it before making its server). aiohttp's
    server builds each connection's protocol from the name `RequestHandler` in
    `aiohttp.web_server`, with no parameter for it: that name is pointed at the
    subclass (idempotent), which behaves exactly as its parent for connections
    without this module's handler arguments."""
    setattr(web_server, "RequestHandler", _Protocol)  # noqa: B010 (a module's name, on purpose)
    return {"logger": LOG, "head_timeout": HEAD_TIMEOUT}
