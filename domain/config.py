"""Configuration from the environment, read and checked in one place.

`kalends serve` and `kalends worker` call `load()` before they start anything,
so a bad value stops them with one line that names the variable, what it holds
and what it should hold, instead of failing later inside a request.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from domain import origins
from domain.connected.provider import ProviderSettings


class ConfigError(ValueError):
    """A setting that cannot be used; its message is one line for the operator."""


@dataclass(frozen=True)
class Rate:
    """`requests` per `seconds`: the quota and window of a rate-limit policy."""

    requests: int
    seconds: int

    @property
    def interval(self) -> timedelta:
        """The time one request uses up of the window (GCRA's emission interval)."""
        return timedelta(seconds=self.seconds / self.requests)

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    jobs_in_process: bool = True
    job_heartbeat: timedelta = timedelta(seconds=30)
    mcp_allowed_origins: frozenset[str] = frozenset()
    rate_limit: Rate | None = Rate(6000, 60)
    """Per consumer, across REST, /graphql and MCP; None: unlimited."""
    anonymous_rate_limit: Rate | None = Rate(600, 60)
    """Per client address, for requests without a valid credential; None: unlimited."""
    metrics_token: str | None = None
    """When set, GET /metrics needs `Authorization: Bearer <token>`; else loopback only."""
    drain_seconds: float = 0.0
    """After SIGTERM, keep serving (with /readyz at 503) at least this long, so that a
    load balancer stops sending requests before the port closes."""
    secret_key: str | None = None
    """Encrypts connected accounts' secrets; else a key file in KALENDS_DATA_DIR."""
    sync_interval: timedelta = timedelta(seconds=300)
    """How often each connected account is synced."""
    providers: ProviderSettings = field(default_factory=ProviderSettings)
    public_url: str | None = None
    """The service's public base URL (scheme, host, port); else each request's own.
    /mcp's canonical URL, the tokens' audience, is this plus /mcp."""
    oauth_issuer: str | None = None
    """An external authorization server for /mcp; None: Kalends is its own."""
    oauth_access_token_ttl: timedelta = timedelta(minutes=15)
    oauth_allow_loopback_clients: bool = False
    """Accept Client ID Metadata Documents served over http from loopback
    (local development and tests); never for a public deployment."""
    smtp_url: str | None = None
    """Where attendee e-mail goes: smtp://[user:password@]host[:port] (STARTTLS when
    the server offers it) or smtps://... (TLS from the start); None: none is sent."""
    mail_from: str = "kalends@localhost"
    """The address attendee e-mail comes from, and its iCalendar ORGANIZER."""
    webhook_allow_http: bool = False
    """Accept http webhook URLs to loopback hosts (local development and tests)."""
    webhook_retry_schedule: tuple[timedelta, ...] = tuple(
        timedelta(seconds=s) for s in (0, 5, 300, 1800, 7200, 18000, 36000, 36000))
    """Standard Webhooks': each delay follows the failure of the attempt before;
    after the last attempt fails the endpoint is disabled."""
    webhook_timeout: timedelta = timedelta(seconds=15)
    """Per delivery attempt: connecting, sending, and the status line."""
    read_database_urls: tuple[str, ...] = ()
    """Streaming replicas the reads may go to (db/replicas.py); none: the primary only."""
    read_max_lag: float = 5.0
    """Seconds a replica may be behind the primary and still be read."""


DEFAULTS = Settings()

_SWITCH = {"on": True, "1": True, "true": True, "yes": True,
           "off": False, "0": False, "false": False, "no": False}
_RATE = re.compile(r"^\s*(\d{1,9})\s*/\s*(\d{1,7})\s*s?\s*$")


def load(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    return Settings(
        database_url=_database_url(env.get("DATABASE_URL")),
        jobs_in_process=_switch(env, "KALENDS_JOBS", DEFAULTS.jobs_in_process),
        job_heartbeat=_seconds(env, "KALENDS_JOB_HEARTBEAT_SECONDS", DEFAULTS.job_heartbeat),
        mcp_allowed_origins=_origins(env),
        rate_limit=_rate(env, "KALENDS_RATE_LIMIT", DEFAULTS.rate_limit),
        anonymous_rate_limit=_rate(
            env, "KALENDS_RATE_LIMIT_ANONYMOUS", DEFAULTS.anonymous_rate_limit),
        metrics_token=_token(env, "KALENDS_METRICS_TOKEN"),
        drain_seconds=_drain(env, "KALENDS_DRAIN_SECONDS"),
        secret_key=_secret_key(env, "KALENDS_SECRET_KEY"),
        sync_interval=_seconds(env, "KALENDS_SYNC_INTERVAL_SECONDS", DEFAULTS.sync_interval),
        providers=_providers(env),
        public_url=_base_url(env, "KALENDS_PUBLIC_URL"),
        oauth_issuer=_base_url(env, "KALENDS_OAUTH_ISSUER", path=True),
        oauth_access_token_ttl=_seconds(env, "KALENDS_OAUTH_ACCESS_TOKEN_SECONDS",
                                        DEFAULTS.oauth_access_token_ttl),
        oauth_allow_loopback_clients=_switch(env, "KALENDS_OAUTH_ALLOW_LOOPBACK_CLIENTS",
                                             DEFAULTS.oauth_allow_loopback_clients),
        smtp_url=_smtp_url(env, "KALENDS_SMTP_URL"),
        mail_from=_address(env, "KALENDS_MAIL_FROM", DEFAULTS.mail_from),
        webhook_allow_http=_switch(env, "KALENDS_WEBHOOK_ALLOW_HTTP",
                                   DEFAULTS.webhook_allow_http),
        webhook_retry_schedule=_schedule(env, "KALENDS_WEBHOOK_RETRY_SCHEDULE",
                                         DEFAULTS.webhook_retry_schedule),
        webhook_timeout=_seconds(env, "KALENDS_WEBHOOK_TIMEOUT_SECONDS",
                                 DEFAULTS.webhook_timeout),
        read_database_urls=_read_urls(env.get("KALENDS_READ_DATABASE_URL")),
        read_max_lag=_seconds(env, "KALENDS_READ_MAX_LAG_SECONDS",
                              timedelta(seconds=DEFAULTS.read_max_lag)).total_seconds(),
    )


def _read_urls(value: str | None) -> tuple[str, ...]:
    """KALENDS_READ_DATABASE_URL: one or more replica URLs, comma-separated, each
    checked as DATABASE_URL is."""
    return tuple(_postgres_url(part.strip(), "KALENDS_READ_DATABASE_URL")
                 for part in (value or "").split(",") if part.strip())


def _smtp_url(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname \
            or parts.path.strip("/") or parts.query or parts.fragment:
        # Not echoed: it may hold a password.
        raise ConfigError(f"{name} is not valid: expected smtp://host[:port] or smtps://...")
    return value


def _address(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        return default
    if value.count("@") != 1 or any(c.isspace() or c in "<>,;\"" for c in value):
        raise _invalid(name, value, "one e-mail address, such as calendar@example.com")
    return value


# Provider endpoints and OAuth clients: the real services by default, fakes in tests.
_PROVIDER_URLS = {
    "caldav_url": "KALENDS_CALDAV_URL",
    "google_api_url": "KALENDS_GOOGLE_API_URL",
    "google_token_url": "KALENDS_GOOGLE_TOKEN_URL",
    "microsoft_api_url": "KALENDS_MICROSOFT_API_URL",
    "microsoft_token_url": "KALENDS_MICROSOFT_TOKEN_URL",
}
_PROVIDER_CLIENTS = {
    "google_client_id": "KALENDS_GOOGLE_CLIENT_ID",
    "google_client_secret": "KALENDS_GOOGLE_CLIENT_SECRET",
    "microsoft_client_id": "KALENDS_MICROSOFT_CLIENT_ID",
    "microsoft_client_secret": "KALENDS_MICROSOFT_CLIENT_SECRET",
}


def _providers(env: Mapping[str, str]) -> ProviderSettings:
    values: dict[str, Any] = {}
    for key, name in _PROVIDER_URLS.items():
        value = env.get(name, "").strip()
        if value:
            if urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname:
                raise _invalid(name, value, "an http(s) URL")
            values[key] = value.rstrip("/")
    for key, name in _PROVIDER_CLIENTS.items():
        if env.get(name, "").strip():
            values[key] = env[name].strip()
    return dataclasses.replace(ProviderSettings(), **values)


def _base_url(env: Mapping[str, str], name: str, *, path: bool = False) -> str | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment or (parts.path.strip("/") and not path):
        raise _invalid(name, value, "an http(s) URL" + (" with no query" if path else
                                                         " with no path, such as https://host"))
    # An issuer identifier is compared as a string (RFC 8414): kept as written.
    return value if path else value.rstrip("/")


def _secret_key(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if not value:
        return None
    if len(value) < 32 or not value.isprintable() or value != value.strip():
        # Not echoed: it is a secret.
        raise ConfigError(f"{name} is not valid: expected at least 32 printable characters")
    return value


def _invalid(name: str, value: str, expected: str) -> ConfigError:
    shown = value if len(value) <= 80 else value[:77] + "..."
    return ConfigError(f"{name}={shown!r} is not valid: expected {expected}")


def database_url(environ: Mapping[str, str] | None = None) -> str | None:
    """DATABASE_URL alone, checked as `load` checks it: for the commands that read
    nothing else (`migrate`, `admin`)."""
    env = os.environ if environ is None else environ
    return _database_url(env.get("DATABASE_URL"))


def _database_url(value: str | None) -> str | None:
    return _postgres_url(value, "DATABASE_URL") if value else None


def _postgres_url(value: str, name: str) -> str:
    """`value`, the variable `name`, if it is a PostgreSQL URL the driver reads as
    written."""
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    # Never echo it: a DSN may carry a password.
    if parts is None or parts.scheme not in ("postgres", "postgresql"):
        raise ConfigError(f"{name} is not valid: expected postgresql://user:pass@host/db")
    if parts.netloc.count("@") > 1 or "@" in parts.path + parts.fragment \
            or any("@" in piece.partition("=")[0] for piece in parts.query.split("&")):
        # An unencoded @ / ? or # in a password (a query parameter's name never has
        # an @): the driver would take part of the password for the host, and name
        # it in its errors.
        raise ConfigError(f"{name} is not valid: characters such as @ / ? # in the user "
                          "name or password must be percent-encoded (%40 %2F %3F %23)")
    return value


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    try:
        return _SWITCH[value.strip().lower()]
    except KeyError:
        raise _invalid(name, value, "on or off") from None


def _seconds(env: Mapping[str, str], name: str, default: timedelta) -> timedelta:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 86400:
        raise _invalid(name, value, "a number of seconds, more than 0 and at most 86400")
    return timedelta(seconds=seconds)


def _schedule(env: Mapping[str, str], name: str, default: tuple[timedelta, ...]
              ) -> tuple[timedelta, ...]:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    try:
        delays = [float(part) for part in value.split(",")]
    except ValueError:
        delays = []
    if not 1 <= len(delays) <= 50 or not all(0 <= d <= 7 * 86400 for d in delays):
        raise _invalid(name, value, "1 to 50 comma-separated delays in seconds, each 0 to 604800")
    return tuple(timedelta(seconds=d) for d in delays)


def _drain(env: Mapping[str, str], name: str) -> float:
    value = env.get(name)
    if value is None or not value.strip():
        return DEFAULTS.drain_seconds
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 300:
        raise _invalid(name, value, "a number of seconds from 0 to 300")
    return seconds


def _origins(env: Mapping[str, str]) -> frozenset[str]:
    value = env.get(origins.ENV_VAR, "")
    try:
        return origins.parse(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _rate(env: Mapping[str, str], name: str, default: Rate | None) -> Rate | None:
    value = env.get(name)
    if value is None or not value.strip():
        return default
    if value.strip().lower() == "off":
        return None
    match = _RATE.match(value)
    requests, seconds = (int(match[1]), int(match[2])) if match else (0, 0)
    if not (requests >= 1 and 1 <= seconds <= 86400):
        raise _invalid(name, value, "REQUESTS/SECONDS such as 6000/60 (seconds 1..86400), or off")
    return Rate(requests, seconds)


def _token(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if not value:
        return None
    if len(value) < 16 or not value.isprintable() or value != value.strip():
        # Not echoed: it is a secret.
        raise ConfigError(f"{name} is not valid: expected at least 16 printable characters")
    return value
