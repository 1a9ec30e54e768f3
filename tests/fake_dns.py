"""A resolver for aiohttp that answers each name with the address a test gives, as a DNS
server could: a name of the test's own at a loopback or private address
(tests/domain/test_outbound.py, tests/domain/test_connected_origins.py)."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult


class Names(AbstractResolver):
    """Answers each name of `names` with its address."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        return [{"hostname": host, "host": self.names[host], "port": port,
                 "family": socket.AF_INET, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        pass
