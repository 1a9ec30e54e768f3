"""Outbound HTTP to URLs that someone else chose (client metadata documents,
webhooks), guarded against server-side request forgery.

The guard sits in the connector: every host name is resolved by
`GuardedResolver`, which drops the addresses that are not public, and aiohttp
connects only to the addresses the resolver returned. The address checked is
therefore the address connected to; there is no window for DNS rebinding
between a check and the connection. IP-literal hosts, which aiohttp does not
pass to the resolver, are checked by `_GuardedConnector` against the same rule.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import aiohttp
import orjson
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from aiohttp.tracing import Trace
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

_IP: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

# NAT64 (RFC 6052): the last 32 bits are the IPv4 address actually reached.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
_CHUNK = 16 * 1024
_USER_AGENT = "Kalends/1 (+outbound)"


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


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback IP literal (brackets allowed), by name only."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    ip = _parse_ip(host)
    return ip is not None and _is_loopback(ip)


def is_refused_literal(host: str, *, allow_loopback: bool = False) -> bool:
    """Whether `host` is an IP literal that `is_allowed_address` refuses. What
    aiohttp would treat as a literal (it contains a colon or only digits and
    dots) counts as one, and must pass, or nothing is sent."""
    looks_literal = ":" in host or host.replace(".", "").isdigit()
    return (looks_literal or _parse_ip(host) is not None) and not is_allowed_address(
        host, allow_loopback=allow_loopback)


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
    except TimeoutError as exc:
        raise OutboundError("timed out") from exc
    except aiohttp.ClientConnectorDNSError as exc:
        raise OutboundError(f"{target.raw_host} could not be resolved") from exc
    except aiohttp.ClientConnectorError as exc:
        raise OutboundError(f"could not connect to {target.raw_host}") from exc
    except aiohttp.ClientError as exc:
        raise OutboundError(f"request failed: {type(exc).__name__}") from exc
    except ValueError as exc:
        raise OutboundError(f"request failed: {exc}") from exc
    try:
        return orjson.loads(body), headers
    except orjson.JSONDecodeError as exc:
        raise OutboundError("the body is not valid JSON") from exc
