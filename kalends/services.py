"""Where the aiohttp application keeps its process-wide services."""

from aiohttp import web

from graph.context import Services

SERVICES = web.AppKey("services", Services)

__all__ = ["SERVICES", "Services"]
