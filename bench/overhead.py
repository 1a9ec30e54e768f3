"""What the GraphQL core costs a REST page: one `kalends serve` process against
bench/handwritten.py (a hand-written aiohttp + asyncpg handler running the
project's own SQL), both on the same database, alternated A B A B.

    python bench/overhead.py [--events 150] [--rounds 2] [--requests 2000]
                             [--warmup 200] [--concurrency 16]

Seeds a profile with `--events` events through the API, checks that both
servers answer each page with byte-identical bodies, then measures
`GET /v1/events?limit=20`, `GET /v1/events?limit=100` and `GET /v1/events/{id}`
on Kalends (A) and the hand-written handler (B), and prints the ratios A/B of
requests per second (the median over rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import harness
from harness import Result, Scenario

HANDWRITTEN = Path(__file__).resolve().parent / "handwritten.py"


async def _seed(session: aiohttp.ClientSession, url: str, count: int) -> list[str]:
    [profile] = await harness.seed(session, Scenario(
        "POST /v1/profiles", lambda i: f"{url}/v1/profiles", method="POST", expected=201,
        body_for=lambda i: {"platform_id": f"oh-{secrets.token_hex(4)}",
                            "display_name": "Overhead bench"}), 1, 1)
    created = await harness.seed(session, Scenario(
        "POST events", lambda i: f"{url}/v1/profiles/{profile['id']}/events", method="POST",
        expected=201, body_for=lambda i: {
            "title": f"Event {i}", "description": "Seeded by bench/overhead.py",
            "location": "Room 1", "start_time": f"2031-01-{1 + i % 28:02d}T{i % 24:02d}:00",
            "start_timezone": "Europe/Paris", "end_time": f"2031-01-{1 + i % 28:02d}T23:30",
            "end_timezone": "Europe/Paris"}), count, 8)
    return [e["id"] for e in created]


async def _start_handwritten(dsn: str) -> tuple[subprocess.Popen[bytes], str]:
    port = harness._free_port()
    # The service's environment: the hand-written handler opens the same vault
    # (KALENDS_DATA_DIR's key) to read the sealed cursor key.
    process = subprocess.Popen([sys.executable, str(HANDWRITTEN), "--port", str(port),
                                "--dsn", dsn], env=harness._SERVICE_ENV)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as probe:
        while True:
            try:
                async with probe.get(f"{url}/v1/events/none") as response:
                    if response.status in (401, 404):
                        return process, url
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the hand-written server did not start")
            await asyncio.sleep(0.1)


async def _same_bodies(session: aiohttp.ClientSession, a: str, b: str, path: str) -> None:
    bodies = []
    for base in (a, b):
        async with session.get(f"{base}{path}") as response:
            if response.status != 200:
                raise RuntimeError(f"{base}{path} answered {response.status}")
            bodies.append(await response.read())
    if bodies[0] != bodies[1]:
        raise RuntimeError(f"{path}: the bodies differ\n{bodies[0][:400]!r}\n{bodies[1][:400]!r}")


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    ids = await _seed(session, url, args.events)
    paths = {"GET /v1/events?limit=20": lambda i: "/v1/events?limit=20",
             "GET /v1/events?limit=100": lambda i: "/v1/events?limit=100",
             "GET /v1/events/{id}": lambda i: f"/v1/events/{ids[i % len(ids)]}"}
    async with harness.database_url() as dsn:
        process, other = await _start_handwritten(dsn)
        try:
            for path_for in paths.values():
                await _same_bodies(session, url, other, path_for(0))
            print("bodies byte-identical on every page", flush=True)
            results: list[Result] = []
            for round_ in range(args.rounds):
                for name, path_for in paths.items():
                    for label, base in (("A kalends", url), ("B hand-written", other)):
                        scenario = Scenario(f"{label} {name} #{round_ + 1}",
                                            lambda i, b=base, p=path_for: f"{b}{p(i)}")
                        results.append(await harness.measure(
                            session, scenario, args.warmup, args.requests, args.concurrency,
                            profiled=base == url and round_ == 0))
        finally:
            process.terminate()
            process.wait(timeout=10)
    print()
    for name in paths:
        a = [r for r in results if r.name.startswith("A ") and f" {name} #" in r.name]
        b = [r for r in results if r.name.startswith("B ") and f" {name} #" in r.name]
        ratio = statistics.median(x.rps / y.rps for x, y in zip(a, b, strict=True))
        print(f"{name:<28} kalends / hand-written req/s: {ratio:.2f}")
    return results


def main() -> int:
    args = harness.options(__doc__ or "", {"events": (150, "events to seed"),
                                           "rounds": (2, "A B rounds")})
    return harness.run(_benchmark, args, f"{args.events} events, {args.rounds} rounds")


if __name__ == "__main__":
    sys.exit(main())
