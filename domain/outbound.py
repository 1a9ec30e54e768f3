"""Outbound HTTP to URLs that someone else chose (client metadata documents,
webhooks, connected calendar accounts), guarded against server-side request
forgery.

The guard sits in the connector: every host name is resolved by
`GuardedResolver`, which drops the addresses that are not public, and aiohttp
connects only to the addresses the resolver returned. The address checked is
therefore the address connected to; there is no window for DNS rebinding
between a check and the connection. IP-literal hosts, which aiohttp does not
pass to the resolver, are checked by `_GuardedConnector` against the same rule.

Connected accounts (docs/api-choices.md, "Connected calendars") add one exception and one rule:
the account's own origin, which the operator chose, may be private or loopback; any other
destination must be an https origin of the same registrable domain, and is
then held to the public-address rule. `AccountOrigins` decides by URL before
anything is sent (redirects included, one hop at a time); the connector of
`account_session` enforces the address rule for the origins it does not trust.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import string
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeAlias

import aiohttp
import orjson
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from aiohttp.tracing import Trace
from multidict import CIMultiDict, CIMultiDictProxy
from publicsuffixlist import PublicSuffixList
from yarl import URL

_IP: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

# NAT64 (RFC 6052): the last 32 bits are the IPv4 address actually reached.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_CHUNK = 16 * 1024
_USER_AGENT = "Kalends/1 (+outbound)"
_HEX_DIGITS = frozenset(string.hexdigits)


class OutboundError(Exception):
    """An outbound request that failed or was refused; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Refused(OutboundError):
    """The destination is not a public address: nothing was sent."""


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address that an IPv6 address stands for, if it stands for one."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _is_public(ip: _IP) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return _is_public(embedded)
        if ip.is_site_local:
            return False
    # `is_global` alone lets multicast through (224/4 and ff00::/8 are "global"),
    # and the IANA registries behind it change between Python releases.
    return ip.is_global and not (
        ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
        or ip.is_reserved or ip.is_unspecified
    )


def _is_loopback(ip: _IP) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def _parse_ip(address: str) -> _IP | None:
    try:
        return ipaddress.ip_address(address.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def is_allowed_address(address: str, *, allow_loopback: bool = False) -> bool:
    """Whether outbound connections may go to this IP address (not a host name)."""
    ip = _parse_ip(address)
    if ip is None:
        return False
    return _is_public(ip) or (allow_loopback and _is_loopback(ip))


def is_loopback_name(host: str) -> bool:
    """`localhost` or a name under it (RFC 6761: loopback by definition), in any
    case, with any number of trailing dots (`localhost..` is still read as
    `localhost` by some resolvers)."""
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def is_loopback_host(host: str) -> bool:
    """A loopback name or a loopback IP literal (brackets allowed), by name only."""
    if is_loopback_name(host):
        return True
    ip = _parse_ip(host)
    return ip is not None and _is_loopback(ip)


def _is_ipv4_spelling(host: str) -> bool:
    """Whether some reader takes `host` for an IPv4 address: a URL parser does
    when its last label is a number (WHATWG URL: decimal, or hex with `0x`, one
    trailing dot ignored), and a resolver (inet_aton) reads octal, hex and
    shortened forms such as `127.1` or `0x7f.1`. Any number of trailing dots is
    read past: `127.0.0.1..` is no name to resolve, and counts as a literal."""
    last = host.rstrip(".").split(".")[-1].lower()
    if last.isascii() and (last.isdigit() or (
            last.startswith("0x") and set(last[2:]) <= _HEX_DIGITS)):
        return True
    try:
        socket.inet_aton(host)
    except (OSError, ValueError):
        return False
    return True


def is_refused_literal(host: str, *, allow_loopback: bool = False) -> bool:
    """Whether `host` is an IP literal that `is_allowed_address` refuses. Every
    spelling that a URL parser or a resolver turns into an address counts as a
    literal, and only the usual ones (dotted quad, IPv6) can pass: the address
    of `0x7f.1` or `2130706433` depends on who reads it."""
    looks_literal = ":" in host or _is_ipv4_spelling(host)
    return (looks_literal or _parse_ip(host) is not None) and not is_allowed_address(
        host, allow_loopback=allow_loopback)


def is_refused_host(host: str, *, allow_loopback: bool = False) -> bool:
    """What a URL given to the service may not name, before any resolution: an
    IP literal that `is_refused_literal` refuses, or (unless loopback is
    allowed) a name that is loopback by definition."""
    return is_refused_literal(host, allow_loopback=allow_loopback) or (
        not allow_loopback and is_loopback_name(host))


class GuardedResolver(AbstractResolver):
    """Resolves with `inner` (threaded getaddrinfo by default) and keeps only the
    addresses that `is_allowed_address` accepts; `Refused` when none remain."""

    def __init__(self, *, allow_loopback: bool = False,
                 inner: AbstractResolver | None = None) -> None:
        self._allow_loopback = allow_loopback
        self._inner = inner if inner is not None else ThreadedResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed = [r for r in results
                   if is_allowed_address(r["host"], allow_loopback=self._allow_loopback)]
        if not allowed:
            # The addresses stay out of the message: it may reach the requester.
            raise Refused(f"{host} does not resolve to a public address")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


class _GuardedConnector(aiohttp.TCPConnector):
    """A TCP connector that also checks IP-literal hosts, which aiohttp connects
    to without asking the resolver. Overrides a private method: the tests that
    request IP literals fail if a new aiohttp stops calling it."""

    def __init__(self, resolver: GuardedResolver, *, allow_loopback: bool) -> None:
        super().__init__(resolver=resolver, use_dns_cache=False)
        self._allow_loopback = allow_loopback

    async def _resolve_host(self, host: str, port: int,
                            traces: Sequence[Trace] | None = None) -> list[ResolveResult]:
        if is_refused_literal(host, allow_loopback=self._allow_loopback):
            raise Refused(f"{host} is not a public address")
        return await super()._resolve_host(host, port, traces)


def guarded_session(*, allow_loopback: bool = False, timeout: float = 5.0) -> aiohttp.ClientSession:
    """A client session that connects only to public addresses (and loopback
    when `allow_loopback`, for tests and local development).

    Call it inside a running event loop; close the session when done.
    """
    resolver = GuardedResolver(allow_loopback=allow_loopback)
    return aiohttp.ClientSession(
        connector=_GuardedConnector(resolver, allow_loopback=allow_loopback),
        timeout=aiohttp.ClientTimeout(total=timeout),
        headers={"User-Agent": _USER_AGENT},
        # Cookies set by one destination must not ride along to another.
        cookie_jar=aiohttp.DummyCookieJar(),
        # No proxy from the environment: the resolver would vet the proxy, not the target.
        trust_env=False,
    )


def check_url(url: str, *, allow_http: bool) -> URL:
    """The URL to request: https, or http to a loopback host when `allow_http`."""
    try:
        parsed = URL(url)
    except (TypeError, ValueError) as exc:
        raise OutboundError(f"not a valid URL: {exc}") from exc
    if not parsed.absolute or not parsed.raw_host:
        raise OutboundError("not an absolute URL")
    if parsed.scheme == "https":
        return parsed
    if parsed.scheme == "http" and allow_http and is_loopback_host(parsed.raw_host):
        return parsed
    raise OutboundError("only https URLs are fetched")


def _failure(exc: Exception, target: URL) -> OutboundError:
    """What a failed request's exception means, for the log and the caller."""
    if isinstance(exc, TimeoutError):
        return OutboundError("timed out")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return OutboundError(f"{target.raw_host} could not be resolved")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return OutboundError(f"could not connect to {target.raw_host}")
    if isinstance(exc, aiohttp.ClientError):
        return OutboundError(f"request failed: {type(exc).__name__}")
    return OutboundError(f"request failed: {exc}")


def _is_json_type(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json"))


async def _read_limited(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    # Content-Length is only a hint (and counts compressed bytes): the running
    # total of what is actually read, after decompression, is the limit.
    declared = response.content_length
    if declared is not None and declared > max_bytes and not response.headers.get(
            "Content-Encoding"):
        raise OutboundError(f"the response is larger than {max_bytes} bytes")
    body = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise OutboundError(f"the response is larger than {max_bytes} bytes")
    return bytes(body)


async def fetch_json(session: aiohttp.ClientSession, url: str, *, max_bytes: int,
                     allow_http: bool = False) -> tuple[Any, Mapping[str, str]]:
    """GET a JSON document: https only (http only to loopback hosts when
    `allow_http`), no redirects followed, at most `max_bytes` read.

    Returns the parsed document and the response headers. Every failure is an
    `OutboundError` (`Refused` when the destination is not public).
    """
    target = check_url(url, allow_http=allow_http)
    try:
        async with session.get(target, allow_redirects=False,
                               headers={"Accept": "application/json"}) as response:
            if 300 <= response.status < 400:
                raise OutboundError(f"redirects are not followed (HTTP {response.status})")
            if response.status != 200:
                raise OutboundError(f"HTTP {response.status}")
            if not _is_json_type(response.content_type):
                raise OutboundError(f"not JSON (content type {response.content_type!r})")
            body = await _read_limited(response, max_bytes)
            headers = CIMultiDictProxy(CIMultiDict(response.headers))
    except OutboundError:
        raise
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        raise _failure(exc, target) from exc
    try:
        return orjson.loads(body), headers
    except orjson.JSONDecodeError as exc:
        raise OutboundError("the body is not valid JSON") from exc


# -- connected accounts (docs/api-choices.md, "Connected calendars") ----------------------

# The (host, port) pairs that the request being made may reach at any address:
# the account's own origins. Set by `AccountOrigins.trusting` around requests;
# the connector reads it in the requesting task.
_TRUSTED: ContextVar[frozenset[tuple[str, int]]] = ContextVar("kalends_outbound_trusted",
                                                              default=frozenset())
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
_MAX_ACCOUNT_REPLY = 64 * 1024 * 1024


def _is_trusted(host: str, port: int) -> bool:
    return (host, port) in _TRUSTED.get()


@functools.cache
def _public_suffixes() -> PublicSuffixList:
    # The list the package ships (read once, on first use): never fetched.
    return PublicSuffixList()


def registrable_domain(host: str) -> str | None:
    """The registrable domain of a host name by the Public Suffix List (ICANN and
    private sections: `a.github.io` and `b.github.io` are different sites); None
    for an IP address (in any spelling) and for a public suffix itself."""
    if ":" in host or _is_ipv4_spelling(host):
        return None
    return _public_suffixes().privatesuffix(host.lower())


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    """As yarl gives it: lower-case, IDNA-encoded, IPv6 without brackets."""
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def _origin(url: URL) -> Origin | None:
    if url.scheme not in ("http", "https") or not url.raw_host or url.port is None:
        return None
    return Origin(url.scheme, url.raw_host, url.port)


@dataclass(frozen=True)
class Answer:
    """A provider's reply, read in full: `url` is where it came from, after the
    redirects that were followed (relative references resolve against it)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    url: URL


@dataclass(frozen=True)
class Hop:
    """Where a redirect leads, and how to ask there: HTTP turns a 303 (and a
    301 or 302 after a POST) into a GET without a body; the others keep both."""

    url: URL
    method: str
    keeps_body: bool


class AccountOrigins:
    """Where one connected account's traffic may go (docs/api-choices.md, "Connected
    calendars"): the origins of the account's URLs (for CalDAV, the URL it was connected with;
    for the OAuth providers, the configured API and token endpoints), at whatever
    address they resolve to; and any other https origin of the same registrable
    domain, at public addresses only. Nothing else is sent anything."""

    def __init__(self, *urls: str) -> None:
        own: list[Origin] = []
        for url in urls:
            origin = _origin(URL(url))
            if origin is None:
                raise ValueError(f"{url!r} is not an absolute http(s) URL")
            own.append(origin)
        self._own = frozenset(own)
        self._names = ", ".join(dict.fromkeys(str(o) for o in own))
        self._sites = frozenset(d for o in own if (d := registrable_domain(o.host)))
        self._trusted = frozenset((o.host, o.port) for o in own)

    def check(self, url: URL | str) -> URL:
        """The URL to request, or `Refused` naming its host."""
        try:
            target = URL(url) if isinstance(url, str) else url
            origin = _origin(target) if target.absolute else None
        except (TypeError, ValueError):
            origin = None
        if origin is None:
            raise Refused(f"{str(url)[:200]!r} is not an absolute http(s) URL; not followed")
        if origin in self._own:
            return target
        if origin.scheme == "https" and registrable_domain(origin.host) in self._sites:
            return target
        raise Refused(
            f"{origin.host} is neither this account's server ({self._names}) nor an https "
            f"host of its domain; nothing was sent there")

    def redirect(self, current: URL, status: int, location: str | None,
                 method: str) -> Hop | None:
        """None when a reply is no redirect; else where it leads, if `check`
        allows it (`Refused` if not: a redirect is never followed elsewhere)."""
        if status not in REDIRECTS or location is None:
            return None
        try:
            following = current.join(URL(location))
        except ValueError as exc:
            raise OutboundError(f"unreadable redirect from {current.host}") from exc
        target = self.check(following)
        if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
            return Hop(target, "GET", keeps_body=False)
        return Hop(target, method, keeps_body=True)

    @contextmanager
    def trusting(self, session: aiohttp.ClientSession) -> Iterator[None]:
        """Requests on `session` (from `account_session`) within this block may
        reach the account's own origins at any address; every other host must
        resolve to public ones. The caller checks each URL with `check` first."""
        if not isinstance(session.connector, _AccountConnector):
            # Any other connector would let a same-site name reach a private address.
            raise TypeError("connected-account traffic needs a session from account_session()")
        token = _TRUSTED.set(self._trusted)
        try:
            yield
        finally:
            _TRUSTED.reset(token)

    async def request(self, session: aiohttp.ClientSession, method: str, url: URL | str, *,
                      headers: Mapping[str, str] | None = None,
                      max_bytes: int = _MAX_ACCOUNT_REPLY, **kwargs: Any) -> Answer:
        """Send one request on a session from `account_session`, following
        redirects (at most five) only where `check` allows. The reply is read in
        full, up to `max_bytes`.

        Every failure is an `OutboundError`; `Refused` when the destination (or
        a redirect's) is not allowed, and then nothing was sent to it."""
        target = self.check(url)
        with self.trusting(session):
            for _ in range(MAX_REDIRECTS + 1):
                try:
                    async with session.request(method, target, headers=headers,
                                               allow_redirects=False, **kwargs) as response:
                        hop = self.redirect(target, response.status,
                                            response.headers.get("Location"), method)
                        if hop is None:
                            body = await _read_limited(response, max_bytes)
                            return Answer(response.status,
                                          CIMultiDictProxy(CIMultiDict(response.headers)),
                                          body, target)
                except OutboundError:
                    raise
                except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
                    raise _failure(exc, target) from exc
                target, method = hop.url, hop.method
                # The query of a redirect's target is its own.
                kwargs.pop("params", None)
                if not hop.keeps_body:
                    kwargs = {k: v for k, v in kwargs.items() if k not in ("data", "json")}
                    headers = {k: v for k, v in (headers or {}).items()
                               if k.lower() != "content-type"}
        raise OutboundError(f"more than {MAX_REDIRECTS} redirects")


class _AccountResolver(GuardedResolver):
    """`GuardedResolver`, except that a trusted (host, port) gets every address."""

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if _is_trusted(host, port):
            return await self._inner.resolve(host, port, family)
        return await super().resolve(host, port, family)


class _AccountConnector(aiohttp.TCPConnector):
    """The guarded connector, except for the (host, port) pairs that the
    request in progress trusts (`_TRUSTED`). A pooled connection is checked
    again when reused: it may have been opened for an account that trusted its
    private address, and be asked for now by one that does not."""

    def __init__(self, resolver: _AccountResolver) -> None:
        super().__init__(resolver=resolver, use_dns_cache=False, limit_per_host=4)

    async def _resolve_host(self, host: str, port: int,
                            traces: Sequence[Trace] | None = None) -> list[ResolveResult]:
        if not _is_trusted(host, port) and is_refused_literal(host):
            raise Refused(f"{host} is not a public address")
        return await super()._resolve_host(host, port, traces)

    async def connect(self, req: aiohttp.ClientRequest, traces: list[Trace],
                      timeout: aiohttp.ClientTimeout) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        if not _is_trusted(req.host, req.port or 0):
            transport = connection.transport
            peer = transport.get_extra_info("peername") if transport is not None else None
            if not peer or not is_allowed_address(str(peer[0])):
                connection.close()
                raise Refused(f"{req.host} is not a public address")
        return connection


def account_session(*, resolver: AbstractResolver | None = None) -> aiohttp.ClientSession:
    """The client session of connected-account traffic, used through
    `AccountOrigins` (`request`, or `check` and `trusting`). `resolver` is for
    tests (a fixed answer).

    Call it inside a running event loop; close the session when done.
    """
    return aiohttp.ClientSession(
        connector=_AccountConnector(_AccountResolver(inner=resolver)),
        headers={"User-Agent": "Kalends/1 (connected calendars)"},
        # One session serves every account: one account's cookies must not ride
        # along with another's requests.
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )
