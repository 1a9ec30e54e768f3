"""Profile read throughput and latency of one `kalends serve` process.

    python bench/profiles.py [--profiles 150] [--requests 3000] [--concurrency 16]

Starts the service as a real process on a free loopback port (embedded
PostgreSQL in a fresh temporary KALENDS_DATA_DIR, or DATABASE_URL when set),
creates a user with `kalends admin create-user`, creates the profiles through
the API, then measures, after a warm-up, `GET /v1/profiles/{id}` and
`GET /v1/profiles?limit=100` with a fixed number of concurrent clients. Prints
requests/s and latency percentiles, stops the service with SIGTERM and checks
that it exited cleanly. Exit status 0 only if every measured request answered
200 and the service stopped cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 120.0
"""Seconds for the service to answer /readyz (a first embedded PostgreSQL start is slow)."""
PHASE_TIMEOUT = 180.0
"""Upper bound, in seconds, of any one phase (seeding, warm-up, one measurement)."""
STOP_TIMEOUT = 45.0
"""The service's own shutdown_timeout is 30 s; then the embedded database stops."""


@dataclass
class Result:
    name: str
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    wall: float = 0.0

    @property
    def count(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.count / self.wall if self.wall else 0.0

    def percentile(self, p: float) -> float:
        """Nearest-rank percentile, in milliseconds."""
        ordered = sorted(self.latencies)
        rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
        return ordered[rank - 1] * 1000


# ---------------------------------------------------------------------------
# The service process


def _kalends() -> list[str]:
    script = Path(sys.executable).with_name("kalends")
    if script.exists():
        return [str(script)]
    found = shutil.which("kalends")
    return [found] if found else [sys.executable, "-m", "kalends"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _data_root() -> Path:
    """A temporary directory that is not under /root (the embedded database widens the
    permissions of its data directory's parents)."""
    base = Path(tempfile.gettempdir()).resolve()
    if base == Path("/root") or Path("/root") in base.parents:
        base = Path("/tmp")
    return Path(tempfile.mkdtemp(prefix="kalends-bench-", dir=base))


class Service:
    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "serve.log"
        self._log = self.log_path.open("wb")
        command = [*_kalends(), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def wait_ready(self) -> float:
        started = time.monotonic()
        while time.monotonic() - started < STARTUP_TIMEOUT:
            if self.process.poll() is not None:
                raise RuntimeError(f"the service exited with {self.process.returncode} on start")
            with (suppress(urllib.error.URLError, ConnectionError, TimeoutError),
                  urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as response):
                if response.status == 200:
                    return time.monotonic() - started
            time.sleep(0.2)
        raise RuntimeError(f"the service did not become ready within {STARTUP_TIMEOUT:.0f} s")

    def admin(self, *args: str) -> dict[str, object]:
        done = subprocess.run(
            [*_kalends(), "admin", *args], env=self.env, capture_output=True, timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kalends admin {' '.join(args)} failed: {done.stderr.decode()}")
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def stop(self) -> tuple[int | None, float]:
        """SIGTERM, then wait; returns (exit status or None if still running, seconds)."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_TIMEOUT)
        self._log.close()
        return self.process.poll(), time.monotonic() - started

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _port_closed(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) != 0


def _postgres_running(data_dir: Path) -> bool:
    """Whether an embedded PostgreSQL still runs from the data directory."""
    for pid_file in data_dir.rglob("postmaster.pid"):
        with suppress(OSError, ValueError, IndexError):
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, 0)
            return True
    return False


# ---------------------------------------------------------------------------
# Load


async def _seed(session: aiohttp.ClientSession, url: str, count: int, concurrency: int
                ) -> list[str]:
    run = secrets.token_hex(4)
    ids: list[str] = []
    semaphore = asyncio.Semaphore(concurrency)

    async def create(i: int) -> None:
        body = {"platform_id": f"bench-{run}-{i:04d}", "display_name": f"Bench profile {i}",
                "description": "Created by bench/profiles.py."}
        async with semaphore, session.post(f"{url}/v1/profiles", json=body) as response:
            data = await response.json(content_type=None)
            if response.status != 201:
                raise RuntimeError(f"POST /v1/profiles answered {response.status}: {data}")
            ids.append(data["id"])

    await asyncio.gather(*(create(i) for i in range(count)))
    return ids


async def _load(session: aiohttp.ClientSession, name: str, path_for: Callable[[int], str],
                total: int, concurrency: int) -> Result:
    """`total` GETs from `concurrency` clients, each timing its own requests."""
    result = Result(name)
    next_index = 0

    async def client() -> None:
        nonlocal next_index
        while next_index < total:
            i = next_index
            next_index += 1
            started = time.perf_counter()
            async with session.get(path_for(i)) as response:
                await response.read()
                status = response.status
            result.latencies.append(time.perf_counter() - started)
            result.statuses[status] += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    result.wall = time.perf_counter() - started
    return result


async def _benchmark(url: str, api_key: str, args: argparse.Namespace) -> list[Result]:
    headers = {"Authorization": f"Bearer {api_key}"}
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(headers=headers, connector=connector,
                                     timeout=timeout) as session:
        t0 = time.perf_counter()
        ids = await asyncio.wait_for(
            _seed(session, url, args.profiles, args.concurrency), PHASE_TIMEOUT)
        print(f"created {len(ids)} profiles in {time.perf_counter() - t0:.1f} s", flush=True)
        async with session.get(f"{url}/v1/profiles?limit=100") as response:
            page = await response.json(content_type=None)
        if response.status != 200 or len(page["data"]) != min(100, len(ids)):
            raise RuntimeError(f"GET /v1/profiles?limit=100 answered {response.status}: "
                               f"{len(page.get('data', []))} items")

        scenarios: list[tuple[str, Callable[[int], str]]] = [
            ("GET /v1/profiles/{id}", lambda i: f"{url}/v1/profiles/{ids[i % len(ids)]}"),
            ("GET /v1/profiles?limit=100", lambda i: f"{url}/v1/profiles?limit=100"),
        ]
        results = []
        for name, path_for in scenarios:
            await asyncio.wait_for(
                _load(session, name, path_for, args.warmup, args.concurrency), PHASE_TIMEOUT)
            result = await asyncio.wait_for(
                _load(session, name, path_for, args.requests, args.concurrency), PHASE_TIMEOUT)
            print(f"measured {name}: {result.count} requests in {result.wall:.1f} s", flush=True)
            results.append(result)
        return results


def _table(results: list[Result], args: argparse.Namespace) -> str:
    header = (f"{'endpoint':<28} {'requests':>8} {'non-200':>7} {'req/s':>8} "
              f"{'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7}")
    lines = [header, "-" * len(header)]
    for r in results:
        bad = r.count - r.statuses.get(200, 0)
        lines.append(
            f"{r.name:<28} {r.count:>8} {bad:>7} {r.rps:>8.0f} {r.percentile(50):>7.1f} "
            f"{r.percentile(90):>7.1f} {r.percentile(99):>7.1f} {max(r.latencies) * 1000:>7.1f}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", type=int, default=150, help="profiles to create (150)")
    parser.add_argument("--requests", type=int, default=3000,
                        help="measured requests per endpoint (3000)")
    parser.add_argument("--warmup", type=int, default=300, help="warm-up requests (300)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory and log")
    args = parser.parse_args()
    for name in ("profiles", "requests", "warmup", "concurrency"):
        if not 1 <= getattr(args, name) <= 100_000:
            parser.error(f"--{name} must be 1..100000")

    workdir = _data_root()
    env = dict(os.environ)
    # Run this checkout's code even if the installed `kalends` was installed from elsewhere,
    # or before a package was added (an editable install maps only the packages it saw).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    database = "DATABASE_URL" if env.get("DATABASE_URL") else "embedded PostgreSQL"
    if not env.get("DATABASE_URL"):
        env["KALENDS_DATA_DIR"] = str(workdir / "data")

    print(f"kalends serve (1 process), {database}, data in {workdir}", flush=True)
    service = Service(env, workdir)
    ok = True
    results: list[Result] = []
    try:
        ready = service.wait_ready()
        print(f"ready on {service.url} after {ready:.1f} s", flush=True)
        user = service.admin("create-user", "--email",
                             f"bench-{secrets.token_hex(4)}@example.com", "--name", "Bench")
        results = asyncio.run(_benchmark(service.url, str(user["api_key"]), args))
    except Exception as exc:
        ok = False
        print(f"\nbenchmark failed: {exc}\n--- last lines of {service.log_path}\n"
              f"{service.log_tail()}", file=sys.stderr)
    finally:
        status, took = service.stop()
        if status is None:
            print(f"the service did not exit within {STOP_TIMEOUT:.0f} s of SIGTERM; killing it",
                  file=sys.stderr)
            service.kill()
            ok = False

    stopped_db = env.get("DATABASE_URL") or not _postgres_running(workdir)
    closed = _port_closed(service.port)
    if results:
        print()
        print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
              f"concurrency {args.concurrency}, warm-up {args.warmup}, "
              f"{args.profiles} profiles, loopback")
        print(_table(results, args))
        if any(r.statuses.get(200, 0) != r.count for r in results):
            ok = False
            for r in results:
                print(f"statuses for {r.name}: {dict(r.statuses)}", file=sys.stderr)
    print()
    print(f"SIGTERM: exit status {status} after {took:.1f} s; port closed: {closed}; "
          f"embedded PostgreSQL stopped: {bool(stopped_db)}")
    ok = ok and status == 0 and closed and bool(stopped_db)
    if args.keep or not ok:
        print(f"kept {workdir} (log: {service.log_path})")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
