"""Profile read throughput and latency of one `kalends serve` process.

    python bench/profiles.py [--profiles 150] [--requests 3000] [--concurrency 16]

Starts the service as a real process on a free loopback port (embedded
PostgreSQL in a fresh temporary KALENDS_DATA_DIR, or DATABASE_URL when set),
creates a user with `kalends admin create-user`, creates the profiles through
the API, then measures, after a warm-up, `GET /v1/profiles/{id}` and
`GET /v1/profiles?limit=100` with a fixed number of concurrent clients. Prints
requests/s and latency percentiles, stops the service with SIGTERM and checks
that it exited cleanly. Exit status 0 only if every measured request answered
200 and the service stopped cleanly. The scaffolding is in `harness.py`.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time

import aiohttp
import harness
from harness import Result, Scenario


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    run = secrets.token_hex(4)
    create = Scenario(
        "POST /v1/profiles", lambda i: f"{url}/v1/profiles", method="POST",
        body_for=lambda i: {"platform_id": f"bench-{run}-{i:04d}",
                            "display_name": f"Bench profile {i}",
                            "description": "Created by bench/profiles.py."},
        expected=201,
    )
    t0 = time.perf_counter()
    ids = [p["id"] for p in await harness.seed(session, create, args.profiles, args.concurrency)]
    print(f"created {len(ids)} profiles in {time.perf_counter() - t0:.1f} s", flush=True)
    await harness.check_page(session, url, "/v1/profiles?limit=100", min(100, len(ids)))

    scenarios = [
        Scenario("GET /v1/profiles/{id}", lambda i: f"{url}/v1/profiles/{ids[i % len(ids)]}"),
        Scenario("GET /v1/profiles?limit=100", lambda i: f"{url}/v1/profiles?limit=100"),
    ]
    return [await harness.measure(session, s, args.warmup, args.requests, args.concurrency)
            for s in scenarios]


def main() -> int:
    args = harness.options(__doc__ or "", {"profiles": (150, "profiles to create")})
    return harness.run(_benchmark, args, f"{args.profiles} profiles")


if __name__ == "__main__":
    sys.exit(main())
