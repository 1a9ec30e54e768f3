"""Where the aiohttp application keeps its process-wide services."""

from aiohttp import web

from domain.auth import Viewer
from domain.config import Settings
from domain.ratelimit import Decision
from graph.context import Services
from web.draining import Drain

SERVICES = web.AppKey("services", Services)
SETTINGS = web.AppKey("settings", Settings)
DRAIN = web.AppKey("drain", Drain)
VIEWER = web.RequestKey("viewer", Viewer)
RATE_LIMIT = web.RequestKey("rate_limit", Decision)
REQUEST_ID = web.RequestKey("request_id", str)
OPERATION = web.RequestKey("operation", str)
IDEMPOTENCY_KEY = web.RequestKey("idempotency_key", str)

__all__ = [
    "DRAIN", "IDEMPOTENCY_KEY", "OPERATION", "RATE_LIMIT", "REQUEST_ID", "SERVICES",
    "SETTINGS", "VIEWER", "Services",
]
