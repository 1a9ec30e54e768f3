"""Where the aiohttp application keeps its process-wide services."""

from aiohttp import web

from graph.context import Services

SERVICES = web.AppKey("services", Services)
REQUEST_ID = web.RequestKey("request_id", str)
OPERATION = web.RequestKey("operation", str)
IDEMPOTENCY_KEY = web.RequestKey("idempotency_key", str)

__all__ = ["IDEMPOTENCY_KEY", "OPERATION", "REQUEST_ID", "SERVICES", "Services"]
