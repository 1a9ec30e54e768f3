"""OAuth Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document-00),
as MCP clients use them: the `client_id` is an https URL, and the JSON document
at that URL is the client's registration.

The document is fetched through `domain.outbound` (public addresses only, no
redirects, at most `max_bytes`), checked, and cached. What is checked and why:

- its `client_id` equals the URL by simple string comparison (draft §4);
- it holds no shared secret: no `client_secret`, and `token_endpoint_auth_method`
  is `none` (the draft forbids symmetric secrets; `private_key_jwt` is not
  supported here), so every such client is a public client and uses PKCE;
- `redirect_uris` are https, http on a loopback host, or a private-use scheme
  (RFC 8252), never with a fragment. Anyone can publish a document naming
  `http://localhost/...`: the consent page must show the redirect host and warn
  about loopback-only clients (MCP security considerations).
"""

from __future__ import annotations

import asyncio
import re
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
import rfc3986
from rfc3986 import exceptions as uri_errors
from rfc3986 import validators as uri_validators

from domain import outbound

_MAX_URI = 2000
_MAX_NAME = 200
_MAX_SCOPE = 1000
_MAX_REDIRECT_URIS = 20
# A failed fetch is remembered briefly, so a broken or hostile document is not
# fetched again on every authorization request, yet a fix shows up soon.
_FAILURE_TTL = 10.0

_GRANT_TYPES = frozenset({"authorization_code", "refresh_token"})
_RESPONSE_TYPES = frozenset({"code"})
_SECRET_METHODS = frozenset({"client_secret_basic", "client_secret_post", "client_secret_jwt"})
_LOOPBACK_REDIRECT_HOSTS = frozenset({"127.0.0.1", "[::1]", "localhost"})

# An absolute URI in plain ASCII, percent-escapes well formed, no fragment ("#"
# is not in the set). rfc3986 then checks the components' own grammar.
_URI_SHAPE = re.compile(
    r"[A-Za-z][A-Za-z0-9+.\-]*:(?:[A-Za-z0-9\-._~:/?\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*",
    re.ASCII,
)
_URI_CHECK = (
    uri_validators.Validator()
    .require_presence_of("scheme")
    .check_validity_of("scheme", "userinfo", "host", "port", "path", "query")
)
# RFC 6749 §3.3: space-separated tokens of NQCHAR.
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+(?: [\x21\x23-\x5b\x5d-\x7e]+)*")


@dataclass(frozen=True)
class ClientMetadata:
    client_id: str
    client_name: str | None
    client_uri: str | None
    logo_uri: str | None
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...]
    response_types: tuple[str, ...]
    token_endpoint_auth_method: str
    scope: str | None


class ClientMetadataError(Exception):
    """The client's metadata document could not be fetched or is not acceptable.
    The message is meant for people (an `invalid_client` description, an error
    page); it names the document's URL, which the client chose."""


@dataclass(frozen=True)
class _Uri:
    scheme: str
    host: str | None
    userinfo: str | None
    path: str


def _parse_uri(value: str) -> _Uri | None:
    if len(value) > _MAX_URI or not _URI_SHAPE.fullmatch(value):
        return None
    ref = rfc3986.uri_reference(value)
    try:
        _URI_CHECK.validate(ref)
    except uri_errors.ValidationError:
        return None
    return _Uri(scheme=str(ref.scheme), host=ref.host, userinfo=ref.userinfo,
                path=str(ref.path or ""))


def _is_web_url(uri: _Uri, *, allow_http_loopback: bool) -> bool:
    if not uri.host or uri.userinfo is not None:
        return False
    if uri.scheme == "https":
        return True
    return uri.scheme == "http" and allow_http_loopback and outbound.is_loopback_host(uri.host)


def is_metadata_url(client_id: str, *, allow_loopback: bool = False) -> bool:
    """Whether `client_id` has the form of a metadata document URL (draft §3):
    https, a host and no userinfo, a path other than `/` without `.` or `..`
    segments, no fragment. With `allow_loopback`, http to a loopback host too
    (tests and local development)."""
    uri = _parse_uri(client_id)
    if uri is None or not _is_web_url(uri, allow_http_loopback=allow_loopback):
        return False
    # The raw path: rfc3986 may re-encode, and "%2e%2e" is a ".." segment too.
    path = urlsplit(client_id).path
    if path in ("", "/"):
        return False
    return all(unquote(segment) not in (".", "..") for segment in path.split("/"))


def _problem(client_id: str, text: str) -> ClientMetadataError:
    return ClientMetadataError(f"The client metadata document at {client_id} {text}.")


def _display_text(doc: Mapping[str, Any], key: str, limit: int, client_id: str) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise _problem(client_id, f"has an invalid {key} (a string of at most {limit} "
                                  "characters)")
    # Shown on the consent page: no control or bidi-override characters that
    # could disguise the name.
    if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in value):
        raise _problem(client_id, f"has control characters in {key}")
    return value


def _web_url_field(doc: Mapping[str, Any], key: str, client_id: str,
                   allow_loopback: bool) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    uri = _parse_uri(value) if isinstance(value, str) else None
    if uri is None or not _is_web_url(uri, allow_http_loopback=allow_loopback):
        raise _problem(client_id, f"has an invalid {key} (an https URL is required)")
    return str(value)


def _redirect_uri_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return "is not a string"
    if "#" in value:
        return "has a fragment"
    uri = _parse_uri(value)
    if uri is None:
        return "is not an absolute URI"
    if uri.scheme == "https":
        return None if uri.host and uri.userinfo is None else "has no host or has userinfo"
    if uri.scheme == "http":
        if uri.userinfo is None and (uri.host or "").lower() in _LOOPBACK_REDIRECT_HOSTS:
            return None
        return "uses http with a host other than 127.0.0.1, [::1] or localhost"
    # RFC 8252 §7.1: a private-use scheme is a reverse domain name, so it has a
    # dot; that also keeps out javascript:, data:, file: and their kind.
    if "." in uri.scheme:
        return None
    return f"uses the scheme {uri.scheme!r}, which is neither https nor private-use"


def _redirect_uris(doc: Mapping[str, Any], client_id: str) -> tuple[str, ...]:
    values = doc.get("redirect_uris")
    if not isinstance(values, list) or not values:
        raise _problem(client_id, "has no redirect_uris (a non-empty list is required)")
    if len(values) > _MAX_REDIRECT_URIS:
        raise _problem(client_id, f"has more than {_MAX_REDIRECT_URIS} redirect_uris")
    for value in values:
        problem = _redirect_uri_problem(value)
        if problem is not None:
            shown = value if isinstance(value, str) and len(value) <= _MAX_URI else "…"
            raise _problem(client_id, f"has a redirect URI that {problem}: {shown}")
    return tuple(values)


def _choices(doc: Mapping[str, Any], key: str, default: tuple[str, ...],
             allowed: frozenset[str], client_id: str) -> tuple[str, ...]:
    values = doc.get(key)
    if values is None:
        return default
    if (not isinstance(values, list) or not values
            or not all(isinstance(v, str) for v in values)):
        raise _problem(client_id, f"has an invalid {key} (a non-empty list of strings)")
    unsupported = sorted(set(values) - allowed)
    if unsupported:
        raise _problem(client_id, f"asks for unsupported {key}: {', '.join(unsupported)}"
                                  f" (supported: {', '.join(sorted(allowed))})")
    return tuple(values)


def _auth_method(doc: Mapping[str, Any], client_id: str) -> str:
    method = doc.get("token_endpoint_auth_method", "none")
    if method == "none":
        return "none"
    if isinstance(method, str) and method in _SECRET_METHODS:
        raise _problem(client_id, f"uses {method}: a metadata document cannot establish a "
                                  "shared secret, so only \"none\" (with PKCE) is accepted")
    shown = method if isinstance(method, str) and len(method) <= 100 else "…"
    raise _problem(client_id, f"uses the unsupported token_endpoint_auth_method {shown!r} "
                              "(only \"none\" is supported)")


def _scope(doc: Mapping[str, Any], client_id: str) -> str | None:
    value = doc.get("scope")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > _MAX_SCOPE or not _SCOPE.fullmatch(value):
        raise _problem(client_id, "has an invalid scope (space-separated scope tokens)")
    return value


def parse_document(client_id: str, doc: Any, *, allow_loopback: bool = False) -> ClientMetadata:
    """Check a fetched document against the URL it came from."""
    if not isinstance(doc, dict):
        raise _problem(client_id, "is not a JSON object")
    if doc.get("client_id") != client_id:
        raise _problem(client_id, "names a different client_id (it must equal the "
                                  "document's URL exactly)")
    if "client_secret" in doc or "client_secret_expires_at" in doc:
        raise _problem(client_id, "contains a client_secret, which a metadata document "
                                  "must not have")
    auth_method = _auth_method(doc, client_id)
    grant_types = _choices(doc, "grant_types", ("authorization_code",), _GRANT_TYPES,
                           client_id)
    if "authorization_code" not in grant_types:
        raise _problem(client_id, "does not list the authorization_code grant type")
    return ClientMetadata(
        client_id=client_id,
        client_name=_display_text(doc, "client_name", _MAX_NAME, client_id),
        client_uri=_web_url_field(doc, "client_uri", client_id, allow_loopback),
        logo_uri=_web_url_field(doc, "logo_uri", client_id, allow_loopback),
        redirect_uris=_redirect_uris(doc, client_id),
        grant_types=grant_types,
        response_types=_choices(doc, "response_types", ("code",), _RESPONSE_TYPES, client_id),
        token_endpoint_auth_method=auth_method,
        scope=_scope(doc, client_id),
    )


def _directives(headers: Mapping[str, str]) -> dict[str, str]:
    directives: dict[str, str] = {}
    for part in headers.get("Cache-Control", "").split(","):
        name, _, value = part.partition("=")
        if name.strip():
            directives[name.strip().lower()] = value.strip().strip('"')
    return directives


def _lifetime(headers: Mapping[str, str], ttl: float) -> float:
    """How long a fetched document may be reused: its max-age less its Age, at
    most `ttl`; nothing for no-store / no-cache; `ttl` when it says nothing."""
    directives = _directives(headers)
    if "no-store" in directives or "no-cache" in directives:
        return 0.0
    if "max-age" not in directives:
        return ttl
    try:
        max_age = int(directives["max-age"])
        age = int(headers.get("Age", "0"))
    except ValueError:
        return 0.0  # RFC 9111 §4.2.1: an invalid freshness lifetime means stale.
    return max(0.0, min(ttl, float(max_age - age)))


@dataclass(frozen=True)
class _Entry:
    expires: float
    metadata: ClientMetadata | None
    error: str | None


class ClientMetadataFetcher:
    """Fetches, checks and caches client metadata documents.

    `session` should come from `outbound.guarded_session` (the fetcher does not
    close it); `allow_loopback` admits http client_ids on loopback hosts and
    should match the session's setting.
    """

    def __init__(self, session: aiohttp.ClientSession, *, allow_loopback: bool = False,
                 max_bytes: int = 5 * 1024, ttl: float = 300, max_entries: int = 1000) -> None:
        self._session = session
        self._allow_loopback = allow_loopback
        self._max_bytes = max_bytes
        self._ttl = ttl
        self._max_entries = max_entries
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[ClientMetadata]] = {}

    async def get(self, client_id: str) -> ClientMetadata:
        if not is_metadata_url(client_id, allow_loopback=self._allow_loopback):
            raise ClientMetadataError(
                "The client_id is not a valid client metadata document URL (an https URL "
                "with a path, without a fragment or user information).")
        cached = self._cached(client_id)
        if cached is not None:
            return cached
        task = self._inflight.get(client_id)
        if task is None:
            task = asyncio.create_task(self._load(client_id))
            self._inflight[client_id] = task
            task.add_done_callback(lambda done: self._settled(client_id, done))
        # Shielded: one caller giving up does not cancel the others' fetch.
        return await asyncio.shield(task)

    def _cached(self, client_id: str) -> ClientMetadata | None:
        entry = self._cache.get(client_id)
        if entry is None:
            return None
        if entry.expires <= time.monotonic():
            del self._cache[client_id]
            return None
        self._cache.move_to_end(client_id)
        if entry.error is not None:
            raise ClientMetadataError(entry.error)
        return entry.metadata

    def _settled(self, client_id: str, task: asyncio.Task[ClientMetadata]) -> None:
        if self._inflight.get(client_id) is task:
            del self._inflight[client_id]
        if not task.cancelled():
            task.exception()  # retrieved, even if every caller has given up

    async def _load(self, client_id: str) -> ClientMetadata:
        failure_ttl = min(_FAILURE_TTL, self._ttl)
        try:
            doc, headers = await outbound.fetch_json(
                self._session, client_id, max_bytes=self._max_bytes,
                allow_http=self._allow_loopback)
            metadata = parse_document(client_id, doc, allow_loopback=self._allow_loopback)
        except outbound.OutboundError as exc:
            error = _problem(client_id, f"could not be fetched: {exc.reason}")
            self._store(client_id, _Entry(time.monotonic() + failure_ttl, None, str(error)))
            raise error from exc
        except ClientMetadataError as exc:
            self._store(client_id, _Entry(time.monotonic() + failure_ttl, None, str(exc)))
            raise
        lifetime = _lifetime(headers, self._ttl)
        self._store(client_id, _Entry(time.monotonic() + lifetime, metadata, None))
        return metadata

    def _store(self, client_id: str, entry: _Entry) -> None:
        self._cache.pop(client_id, None)
        if entry.expires <= time.monotonic():
            return
        self._cache[client_id] = entry
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)


def redirect_uri_problem(value: object) -> str | None:
    """Why `value` is not an acceptable redirect URI, or None; registration
    (RFC 7591) holds clients to the same rule as metadata documents."""
    return _redirect_uri_problem(value)
