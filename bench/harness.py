"""What the benchmarks in this directory share: one `kalends serve` process and its checks,
the load loop, latency percentiles and the printed table.

A benchmark script declares its options with `options`, and writes one coroutine that, given
a session authenticated as a fresh user, seeds its data and returns the measured `Result`s;
`run` does the rest: start the service on a free loopback port (embedded PostgreSQL in a
fresh temporary KALENDS_DATA_DIR, or DATABASE_URL when set), wait until it is ready, create
the user with `kalends admin create-user`, print the table, stop the service with SIGTERM,
check that it exited cleanly, and remove the temporary directory unless kept.
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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

REPO = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 120.0
"""Seconds for the service to answer /readyz (a first embedded PostgreSQL start is slow)."""
PHASE_TIMEOUT = 180.0
"""Upper bound, in seconds, of any one phase (seeding, warm-up, one measurement)."""
STOP_TIMEOUT = 45.0
"""The service's own shutdown_timeout is 30 s; then the embedded database stops."""
MAX_COUNT = 100_000
"""Upper bound of every count option."""
UNREFUSED_RATE_LIMIT = "999999999/60"
"""A rate limit that charges every request and refuses none."""


@dataclass
class Result:
    name: str
    expected: int = 200
    """The status every measured request should answer."""
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    wall: float = 0.0
    cpu: float | None = None
    """CPU seconds the serving process spent in the measured phase (`measure(cpu_of=)`)."""

    @property
    def count(self) -> int:
        return len(self.latencies)

    @property
    def unexpected(self) -> int:
        return self.count - self.statuses.get(self.expected, 0)

    @property
    def rps(self) -> float:
        return self.count / self.wall if self.wall else 0.0

    @property
    def cpu_per_request(self) -> float | None:
        """The server's CPU seconds per measured request: steadier than req/s when
        other work shares the machine."""
        return None if self.cpu is None or not self.count else self.cpu / self.count

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


def subdir(workdir: Path, name: str) -> Path:
    """A new folder in the bench's work directory (one per service a bench starts)."""
    path = workdir / name
    path.mkdir()
    return path


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


@dataclass(frozen=True)
class Scenario:
    """One kind of request: the i-th is `method url_for(i)` with the JSON body `body_for(i)`
    (none when `body_for` is None), and should answer `expected`."""

    name: str
    url_for: Callable[[int], str]
    method: str = "GET"
    body_for: Callable[[int], object] | None = None
    expected: int = 200
    headers: Mapping[str, str] | None = None


OnResponse = Callable[[int, int, bytes], None]
"""Called with (request index, status, body) after each response, outside the timing."""


async def load(session: aiohttp.ClientSession, scenario: Scenario, total: int,
               concurrency: int, *, first: int = 0, on_response: OnResponse | None = None,
               stop_on_unexpected: bool = False) -> Result:
    """Requests `first` to `first + total - 1` of `scenario` from `concurrency` clients, each
    timing its own requests; with `stop_on_unexpected`, no request starts after one answered
    other than `scenario.expected`."""
    result = Result(scenario.name, scenario.expected)
    next_index = first
    end = first + total

    async def client() -> None:
        nonlocal next_index
        while next_index < end:
            i = next_index
            next_index += 1
            url = scenario.url_for(i)
            body = None if scenario.body_for is None else scenario.body_for(i)
            started = time.perf_counter()
            async with session.request(scenario.method, url, json=body,
                                       headers=scenario.headers) as response:
                data = await response.read()
                status = response.status
            result.latencies.append(time.perf_counter() - started)
            result.statuses[status] += 1
            if on_response is not None:
                on_response(i, status, data)
            if stop_on_unexpected and status != scenario.expected:
                next_index = end

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    result.wall = time.perf_counter() - started
    return result


def _shown(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")


async def seed(session: aiohttp.ClientSession, scenario: Scenario, count: int,
               concurrency: int, *, first: int = 0) -> list[dict[str, Any]]:
    """The JSON bodies of `count` requests of `scenario` (creations, say), in the order they
    answered; raises at the first that does not answer `scenario.expected`."""
    answers: list[dict[str, Any]] = []
    refused: list[tuple[int, bytes]] = []

    def keep(i: int, status: int, data: bytes) -> None:
        if status == scenario.expected:
            answers.append(json.loads(data))
        elif not refused:
            refused.append((status, data))

    await asyncio.wait_for(
        load(session, scenario, count, concurrency, first=first, on_response=keep,
             stop_on_unexpected=True),
        PHASE_TIMEOUT)
    if refused:
        status, data = refused[0]
        raise RuntimeError(f"{scenario.name} answered {status}: {_shown(data)}")
    return answers


async def check_page(session: aiohttp.ClientSession, url: str, path: str, items: int) -> None:
    """Raises unless `GET path` answers 200 with a page of `items` items."""
    async with session.get(f"{url}{path}") as response:
        page = await response.json(content_type=None)
    if response.status != 200 or len(page["data"]) != items:
        raise RuntimeError(f"GET {path} answered {response.status}: "
                           f"{len(page.get('data', []))} items")


_PROFILE = [False]
"""--profile was given."""


async def measure(session: aiohttp.ClientSession, scenario: Scenario, warmup: int,
                  requests: int, concurrency: int, *, on_response: OnResponse | None = None,
                  profiled: bool = True, cpu_of: int | None = None) -> Result:
    """`warmup` requests (indices 0 to warmup - 1), then `requests` measured ones (the
    following indices); with --profile (and `profiled`), then `requests` more under py-spy.
    `cpu_of`: a process id whose CPU time in the measured phase goes in `Result.cpu`."""
    await asyncio.wait_for(
        load(session, scenario, warmup, concurrency, on_response=on_response), PHASE_TIMEOUT)
    before = None if cpu_of is None else cpu_seconds(cpu_of)
    result = await asyncio.wait_for(
        load(session, scenario, requests, concurrency, first=warmup, on_response=on_response),
        PHASE_TIMEOUT)
    if cpu_of is not None and before is not None:
        result.cpu = cpu_seconds(cpu_of) - before
    print(f"measured {scenario.name}: {result.count} requests in {result.wall:.1f} s",
          flush=True)
    if _PROFILE[0] and profiled:
        await profile(session, scenario, requests, concurrency)
    return result


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process `pid`, all its threads, so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def profile(session: aiohttp.ClientSession, scenario: Scenario, requests: int,
                  concurrency: int, *, top: int = 12) -> None:
    """Sample the service with py-spy (`pip install py-spy`) while it serves `requests` of
    `scenario`, unmeasured; print the functions where most samples were, by self time and
    inclusive of callees. The raw samples stay in the work directory."""
    raw = Path(_SERVICE["workdir"]) / f"profile-{len(os.listdir(_SERVICE['workdir']))}.txt"
    spy = subprocess.Popen(
        ["py-spy", "record", "--pid", _SERVICE["pid"], "--format", "raw", "--rate", "400",
         "--nonblocking", "--output", str(raw)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.sleep(1.0)  # attached
    await asyncio.wait_for(load(session, scenario, requests, concurrency), PHASE_TIMEOUT)
    spy.send_signal(signal.SIGINT)
    await asyncio.to_thread(spy.wait, 30)
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if f]
        if not frames or not count.isdigit():  # a frame's name broke over lines
            continue
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    print(f"\nprofile of {scenario.name} ({total} samples, {raw}):")
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"  {title}:")
        for frame, samples in counter.most_common(top):
            print(f"  {100 * samples / max(total, 1):5.1f}%  {frame}")


def table(results: list[Result]) -> str:
    expected = {r.expected for r in results}
    bad = f"non-{expected.pop()}" if len(expected) == 1 else "unexpected"
    width = max(28, *(len(r.name) for r in results))
    header = (f"{'endpoint':<{width}} {'requests':>8} {bad:>7} {'req/s':>8} "
              f"{'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7}")
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.name:<{width}} {r.count:>8} {r.unexpected:>{len(bad)}} {r.rps:>8.0f} "
            f"{r.percentile(50):>7.1f} {r.percentile(90):>7.1f} {r.percentile(99):>7.1f} "
            f"{max(r.latencies) * 1000:>7.1f}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Options and the run

_COMMON_COUNTS = {
    "requests": (3000, "measured requests per endpoint"),
    "warmup": (300, "warm-up requests"),
    "concurrency": (16, "concurrent clients"),
}


def options(doc: str, counts: Mapping[str, tuple[int, str]] | None = None,
            flags: Mapping[str, str] | None = None,
            **texts: tuple[str | None, str]) -> argparse.Namespace:
    """The command line: the script's own `counts` (name: (default, help); its own
    defaults of --requests, --warmup and --concurrency too), `flags` (name: help) and
    `texts` (string options, as counts), then --keep; every count must be 1 to
    MAX_COUNT."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    all_counts = {**_COMMON_COUNTS, **(counts or {})}
    for name, (default, text) in all_counts.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=f"{text} ({default})")
    for name, text in (flags or {}).items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    for name, (text_default, text) in texts.items():
        parser.add_argument(f"--{name}", default=text_default, help=text)
    parser.add_argument("--keep", action="store_true", help="keep the data directory and log")
    parser.add_argument("--profile", action="store_true",
                        help="after measuring, sample the service with py-spy while it serves "
                             "each endpoint once more, and print the top cost centres")
    args = parser.parse_args()
    _PROFILE[0] = args.profile
    for name in all_counts:
        if not 1 <= getattr(args, name) <= MAX_COUNT:
            parser.error(f"--{name} must be 1..{MAX_COUNT}")
    return args


_SERVICE_ENV: dict[str, str] = {}
"""The service's environment (also given to the processes a bench starts beside it)."""
_SERVICE: dict[str, str] = {}
"""The running service's `pid` and `workdir`, for --profile."""


@asynccontextmanager
async def database_url() -> AsyncIterator[str]:
    """The service's database, for seeding what the API would take too long to make (a
    thousand users, each with a key): DATABASE_URL, or the embedded server joined in its
    data directory (left running for the service)."""
    if _SERVICE_ENV.get("DATABASE_URL"):
        yield _SERVICE_ENV["DATABASE_URL"]
        return
    from db import embedded

    dsn, server = embedded.start(Path(_SERVICE_ENV["KALENDS_DATA_DIR"]))
    try:
        yield dsn
    finally:
        embedded.stop(server)


async def healthz(url: str, name: str, count: int) -> Result:
    """`count` `GET /healthz` one after another, on a session of their own."""
    result = Result(name)
    async with aiohttp.ClientSession() as probe:
        started = loop_time = asyncio.get_running_loop().time()
        for _ in range(count):
            t0 = asyncio.get_running_loop().time()
            async with probe.get(f"{url}/healthz") as response:
                await response.read()
            result.latencies.append(asyncio.get_running_loop().time() - t0)
            result.statuses[response.status] += 1
            await asyncio.sleep(0.005)  # a prober's pace, not a loop of its own
        loop_time = asyncio.get_running_loop().time()
    result.wall = loop_time - started
    return result


async def call(session: aiohttp.ClientSession, method: str, url: str, expected: int,
               body: object = None, *, key: str | None = None) -> Any:
    """One API request that must answer `expected`: its JSON body ({} for 204). `key`:
    sent as the bearer, instead of the session's own."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else None
    async with session.request(method, url, json=body, headers=headers) as response:
        data = await response.json(content_type=None) if response.status != 204 else {}
        if response.status != expected:
            raise RuntimeError(f"{method} {url} answered {response.status}: {data}")
        return data


async def user_keys(dsn: str, count: int, label: str, name: str) -> list[str]:
    """The API keys of `count` new users, made in the database at once (the API would
    take minutes for hundreds): `{label}-{tag}-{i}@example.com`, named `{name} {i}`."""
    from db.database import Database
    from domain import accounts

    db = await Database.connect(dsn, min_size=1, max_size=8)
    try:
        tag = secrets.token_hex(3)
        made = await asyncio.gather(*(
            accounts.create_user(db, f"{label}-{tag}-{i}@example.com", f"{name} {i}")
            for i in range(count)))
    finally:
        await db.close()
    return [str(m["api_key"]) for m in made]


async def until(conn: asyncpg.Connection, query: str, *args: object, timeout: float,
                every: float = 0.01) -> float:
    """Seconds until `query` (a boolean) holds on `conn`, polled every `every` seconds;
    RuntimeError once `timeout` seconds have passed without it."""
    started = time.perf_counter()
    while not await conn.fetchval(query, *args):
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"not within {timeout:.0f} s: {query}")
        await asyncio.sleep(every)
    return time.perf_counter() - started


Benchmark = Callable[[aiohttp.ClientSession, str, argparse.Namespace], Awaitable[list[Result]]]
"""(session authenticated as the bench user, service URL, options) -> measured results."""


async def _with_session(benchmark: Benchmark, url: str, api_key: str,
                        args: argparse.Namespace) -> list[Result]:
    headers = {"Authorization": f"Bearer {api_key}"}
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(headers=headers, connector=connector,
                                     timeout=timeout) as session:
        return await benchmark(session, url, args)


def run(benchmark: Benchmark, args: argparse.Namespace, setting: str) -> int:
    """Runs `benchmark` against a fresh service and returns the exit status: 0 only if every
    measured request answered as expected and the service stopped cleanly. `setting` goes on
    the line above the table (e.g. "150 profiles")."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    workdir = _data_root()
    env = dict(os.environ)
    # Run this checkout's code even if the installed `kalends` was installed from elsewhere,
    # or before a package was added (an editable install maps only the packages it saw).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # A benchmark is no ordinary client: charge its requests (the limiter's cost is part
    # of every request) but never refuse them.
    env.setdefault("KALENDS_RATE_LIMIT", UNREFUSED_RATE_LIMIT)
    database = "DATABASE_URL" if env.get("DATABASE_URL") else "embedded PostgreSQL"
    if not env.get("DATABASE_URL"):
        env["KALENDS_DATA_DIR"] = str(workdir / "data")

    _SERVICE_ENV.update(env)
    print(f"kalends serve (1 process), {database}, data in {workdir}", flush=True)
    service = Service(env, workdir)
    _SERVICE.update(pid=str(service.process.pid), workdir=str(workdir))
    ok = True
    results: list[Result] = []
    try:
        ready = service.wait_ready()
        print(f"ready on {service.url} after {ready:.1f} s", flush=True)
        user = service.admin("create-user", "--email",
                             f"bench-{secrets.token_hex(4)}@example.com", "--name", "Bench")
        results = asyncio.run(_with_session(benchmark, service.url, str(user["api_key"]), args))
    except Exception as exc:
        ok = False
        print(f"\nbenchmark failed: {exc!r}\n--- last lines of {service.log_path}\n"
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
              f"concurrency {args.concurrency}, warm-up {args.warmup}, {setting}, loopback")
        print(table(results))
        if any(r.unexpected for r in results):
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
