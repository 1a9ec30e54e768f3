"""Which browser origins may call the MCP endpoints (DNS-rebinding protection).

streamable-http.mdx "Security": servers MUST validate Origin and answer 403
when it is present and invalid. Requests without Origin (every non-browser
client) pass. Loopback origins always pass, for clients running on the
user's machine; any other origin must be listed, comma-separated, in
KALENDS_MCP_ALLOWED_ORIGINS (e.g. "https://app.example.com").
"""

from __future__ import annotations

from yarl import URL

ENV_VAR = "KALENDS_MCP_ALLOWED_ORIGINS"
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def parse(value: str) -> frozenset[str]:
    """The listed origins, normalised; a malformed entry is a ValueError (it stops
    start-up, see domain.config)."""
    origins = set()
    for item in value.split(","):
        if not item.strip():
            continue
        origin = _normalise(item.strip())
        if origin is None:
            raise ValueError(f"{ENV_VAR}: {item!r} is not an origin like https://app.example.com")
        origins.add(origin)
    return frozenset(origins)


def allowed(origin: str | None, extra: frozenset[str]) -> bool:
    if origin is None:
        return True
    normalised = _normalise(origin)
    if normalised is None:
        return False  # includes the opaque origin "null"
    return URL(normalised).host in _LOOPBACK_HOSTS or normalised in extra


def _normalise(origin: str) -> str | None:
    try:
        url = URL(origin)
    except ValueError:
        return None
    if url.scheme not in ("http", "https") or not url.host:
        return None
    return str(url.origin())
