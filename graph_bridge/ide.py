"""GraphiQL at `GET /graphql` for browsers (docs/graphql.md, "Dashboards: `/graphql`").

Everything the page loads comes from the service itself, from the files the
package carries in graph_bridge/graphiql/ (pinned builds from npm, listed with their
origin in its VERSIONS): a dashboard behind a firewall cannot reach a CDN. The
page holds no credential; the user types the `Authorization` header in
GraphiQL's headers editor, and those headers are never stored by the browser.
Subscriptions run from the page too, over a WebSocket to its own `/graphql`
(graph_bridge/ws.py), the headers editor's headers sent in `connection_init`.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from dataclasses import dataclass
from html import escape
from importlib import resources

from aiohttp import web

_PREFIX = "/graphql/graphiql/"

# The page loads these, scripts in this order: GraphiQL's bundle expects React
# and ReactDOM as globals, and init.js all three.
_STYLES = ("graphiql.min.css", "page.css")
_SCRIPTS = ("react.production.min.js", "react-dom.production.min.js", "graphiql.min.js",
            "init.js")
# Served too, so whoever uses the page can see what it runs and under which licences.
_TEXTS = ("LICENSE.graphiql", "LICENSE.react", "LICENSE.react-dom", "VERSIONS")

_CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_PLAIN = "text/plain; charset=utf-8"
_FOREVER = "public, max-age=31536000, immutable"

# No inline script or style of ours (init.js and page.css are files of their
# own). GraphiQL's fonts are data: URLs in its stylesheet, and its icons data:
# images; its queries go to this same origin, and its subscriptions to a WebSocket
# on it ('self' covers ws: and wss: to the page's own host, CSP Level 3).
# The one inline style allowed, by its hash: the <style> GraphiQL's dialogs add
# to lock scrolling (react-remove-scroll-bar in the bundle), whose text is fixed
# on this page since page.css leaves no scrollbar gap. Blocked, it would change
# nothing visible, but each dialog would log a violation.
_DIALOG_STYLE = "'sha256-Y/huXlwoYkVyQlxwSVcCi1RCDGDCSVBzDt0hYP9qlTc='"
_POLICY = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    f"style-src 'self' {_DIALOG_STYLE}",
    "img-src 'self' data:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
))


@dataclass(frozen=True)
class _Asset:
    body: bytes
    content_type: str
    digest: str
    """Of the body: the page's URL for the asset changes whenever its content does,
    so a long-cached copy is never served stale after an upgrade."""


def _load(name: str) -> _Asset:
    body = resources.files("graph_bridge").joinpath("graphiql", name).read_bytes()
    suffix = name[name.rfind("."):] if "." in name else ""
    content_type = _CONTENT_TYPES.get(suffix, _PLAIN)
    return _Asset(body, content_type, hashlib.sha256(body).hexdigest()[:16])


# The allow-list: only these names are ever served, read once at import (~4 MB).
_ASSETS: dict[str, _Asset] = {name: _load(name) for name in (*_STYLES, *_SCRIPTS, *_TEXTS)}
# Compressed on first request rather than at import (the bundle takes ~0.2 s).
_GZIPPED: dict[str, bytes] = {}


def _url(name: str) -> str:
    """The versioned path the page uses for asset `name`."""
    return f"{_PREFIX}{name}?v={_ASSETS[name].digest}"


def _page_html() -> bytes:
    links = "".join(f'<link rel="stylesheet" href="{escape(_url(n))}">' for n in _STYLES)
    scripts = "".join(f'<script src="{escape(_url(n))}"></script>' for n in _SCRIPTS)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No favicon request: an empty icon of its own (a data: URL, allowed as an image).
        '<link rel="icon" href="data:,">'
        f"<title>Kalends GraphiQL</title>{links}</head><body>"
        '<div id="graphiql">Loading GraphiQL…</div>'
        "<noscript>GraphiQL needs JavaScript. Without it, POST queries to /graphql "
        "with an Authorization header.</noscript>"
        f"{scripts}</body></html>"
    ).encode()


_PAGE = _page_html()


async def page(request: web.Request) -> web.StreamResponse:
    """The GraphiQL page (`GET /graphql` asking for text/html)."""
    return web.Response(body=_PAGE, content_type="text/html", charset="utf-8", headers={
        "Content-Security-Policy": _POLICY,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
        # The same URL runs a query for a client that does not ask for HTML.
        "Vary": "Accept",
    })


async def _asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    asset = _ASSETS.get(name)
    if asset is None:
        raise web.HTTPNotFound()  # the middleware answers it as an unknown route
    headers = {
        "Content-Type": asset.content_type,
        "X-Content-Type-Options": "nosniff",
        # Cached for good only under the URL of this very content.
        "Cache-Control": _FOREVER if request.query.get("v") == asset.digest else "no-cache",
        "Vary": "Accept-Encoding",
    }
    body = asset.body
    if _accepts_gzip(request):
        body = await _gzipped(name, asset)
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


async def _gzipped(name: str, asset: _Asset) -> bytes:
    found = _GZIPPED.get(name)
    if found is None:
        # Off the event loop; two first requests at once both compress, harmlessly.
        found = await asyncio.to_thread(gzip.compress, asset.body, 9, mtime=0)
        _GZIPPED[name] = found
    return found


def _accepts_gzip(request: web.Request) -> bool:
    """Accept-Encoding names gzip (or `*`) with a non-zero weight (RFC 9110 §12.5.3)."""
    weights: dict[str, float] = {}
    for part in request.headers.get("Accept-Encoding", "").split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        weight = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        weights[coding.lower()] = weight
    return weights.get("gzip", weights.get("*", 0.0)) > 0


def setup(app: web.Application) -> None:
    """The page's assets, under /graphql/graphiql/; like the page, they take no key."""
    app.router.add_get(_PREFIX + "{name}", _asset)
