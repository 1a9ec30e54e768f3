"""What the GraphQL core costs a REST page and a dashboard's `/graphql` request:
one `kalends serve` process against bench/handwritten.py (a hand-written aiohttp
+ asyncpg handler running the project's own SQL), both on the same database,
alternated A B A B.

    python bench/overhead.py [--events 150] [--rounds 2] [--requests 2000]
                             [--warmup 200] [--concurrency 16] [--baseline DIR]

Seeds a profile with `--events` events through the API, checks that both
servers answer each page with byte-identical bodies, then measures on Kalends
(A) and the hand-written handler (B), and prints the ratios A/B of requests per
second (the median over rounds), and under them each server's CPU microseconds
per request (the median over rounds; other work on the machine disturbs it less):
- `GET /v1/events?limit=20`, `?limit=100` and `GET /v1/events/{id}`;
- `POST /graphql` with the registry's own `listEvents` (limit 20 and 100) and
  `getEvent` documents: kept (the same text each time), persisted (Apollo's
  hash alone), and cold (a document never seen: parsed and validated, run by
  graphql-core; it is compiled when it comes again).

`--legs TEXT`: only the requests whose name contains TEXT, for more rounds of one
page in the same time (`--legs "listEvents(20) kept" --rounds 6`).

`--baseline REV`: a commit (made into a temporary `git worktree`, removed after)
or another checkout's directory, served as a third process on the same database
and measured in the same rounds (A0), for before/after figures from one run:
run it with the commit before a change to the request path, so the next slip
shows before it lands (bench/README.md).

With two or more cores, the servers (Kalends, the baseline, the hand-written
handler) share core 1 and this load generator runs on core 0, so that the client's
own work does not compete with what is measured (PostgreSQL runs where it may).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import harness
from harness import Result, Scenario

import registry.operations  # noqa: F401  (registers every operation)
from registry import OPERATIONS

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
    # The service's environment: the hand-written handler opens the same vault
    # (KALENDS_DATA_DIR's key) to read the sealed cursor key.
    return await _started("the hand-written server", lambda port: subprocess.Popen(
        [sys.executable, str(HANDWRITTEN), "--port", str(port), "--dsn", dsn],
        env=harness._SERVICE_ENV), "/v1/events/none", (401, 404))


async def _started(what: str, start: Callable[[int], subprocess.Popen[bytes]], probe_path: str,
                   ready: tuple[int, ...], timeout: float = 60) -> tuple[
                       subprocess.Popen[bytes], str]:
    """A server `start`ed on a free port, once `probe_path` answers one of `ready`."""
    port = harness._free_port()
    process = start(port)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as probe:
        while True:
            try:
                async with probe.get(f"{url}{probe_path}") as response:
                    if response.status in ready:
                        return process, url
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"{what} did not start")
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


async def _start_baseline(dsn: str, tree: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`kalends serve` from another checkout, on the same database."""
    env = {**harness._SERVICE_ENV, "DATABASE_URL": dsn, "PYTHONPATH": str(tree)}
    return await _started(f"the baseline in {tree}", lambda port: subprocess.Popen(
        [sys.executable, "-m", "kalends", "serve", "--port", str(port)], cwd=tree, env=env),
        "/readyz", (200,))


@contextlib.contextmanager
def _checkout(baseline: str) -> Iterator[Path]:
    """`baseline` itself when it is a directory, else a temporary worktree of that
    commit, removed afterwards."""
    if Path(baseline).is_dir():
        yield Path(baseline).resolve()
        return
    repo = Path(__file__).resolve().parent.parent
    tree = Path(tempfile.mkdtemp(prefix="kalends-baseline-"))
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--force",
                    str(tree), baseline], check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                       check=False, capture_output=True)


def _pin(*pids: int) -> bool:
    """The servers on core 1 and this process on core 0, where there are two cores."""
    if (os.cpu_count() or 1) < 2 or not hasattr(os, "sched_setaffinity"):
        return False
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():  # every thread, as taskset -a
            os.sched_setaffinity(int(task.name), {1})
    os.sched_setaffinity(0, {0})
    return True


@dataclass(frozen=True)
class _Leg:
    """One measured request kind: on Kalends (`request(base, i)`) and, for the ratio,
    the hand-written handler's REST page of the same data (`handwritten(i)`)."""

    name: str
    method: str
    path_for: Callable[[int], str]
    body_for: Callable[[int], object] | None
    handwritten: Callable[[int], str]
    persisted: bool = False
    """Apollo's persisted queries: a baseline from before them does not run this leg."""


def _legs(ids: list[str]) -> list[_Leg]:
    list_events, get_event = OPERATIONS["listEvents"].document, OPERATIONS["getEvent"].document
    persisted = hashlib.sha256(list_events.encode()).hexdigest()

    def rest(path: str) -> Callable[[int], str]:
        return lambda i: path

    def event(i: int) -> str:
        return f"/v1/events/{ids[i % len(ids)]}"

    def graphql(name: str, body_for: Callable[[int], object], handwritten: Callable[[int], str]
                ) -> _Leg:
        return _Leg(f"POST /graphql {name}", "POST", rest("/graphql"), body_for, handwritten,
                    persisted="persisted" in name)

    return [
        _Leg("GET /v1/events?limit=20", "GET", rest("/v1/events?limit=20"), None,
             rest("/v1/events?limit=20")),
        _Leg("GET /v1/events?limit=100", "GET", rest("/v1/events?limit=100"), None,
             rest("/v1/events?limit=100")),
        _Leg("GET /v1/events/{id}", "GET", event, None, event),
        graphql("listEvents(20) kept", lambda i: {"query": list_events,
                                                  "variables": {"limit": 20}},
                rest("/v1/events?limit=20")),
        graphql("listEvents(100) kept", lambda i: {"query": list_events,
                                                   "variables": {"limit": 100}},
                rest("/v1/events?limit=100")),
        graphql("getEvent kept", lambda i: {"query": get_event,
                                            "variables": {"event_id": ids[i % len(ids)]}},
                event),
        graphql("listEvents(20) persisted", lambda i: {
            "extensions": {"persistedQuery": {"version": 1, "sha256Hash": persisted}},
            "variables": {"limit": 20}}, rest("/v1/events?limit=20")),
        # Renamed, not merely commented: a comment leaves the syntax tree as it was, and
        # Strawberry (the baseline) caches validation by tree.
        graphql("listEvents(20) cold", lambda i: {
            "query": list_events.replace("query listEvents", f"query listEvents{i}"),
            "variables": {"limit": 20}}, rest("/v1/events?limit=20")),
    ]


async def _graphql_answers(session: aiohttp.ClientSession, url: str, leg: _Leg) -> None:
    """A leg's request answers data, no errors (registering a persisted query first)."""
    assert leg.body_for is not None
    body = leg.body_for(0)
    if isinstance(body, dict) and "query" not in body:
        document = OPERATIONS["listEvents"].document
        async with session.post(f"{url}/graphql", json={**body, "query": document}):
            pass
    async with session.post(f"{url}/graphql", json=body) as response:
        answer = await response.json()
    if response.status != 200 or "errors" in answer:
        raise RuntimeError(f"{url} {leg.name}: {response.status} {str(answer)[:400]}")


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    ids = await _seed(session, url, args.events)
    legs = [leg for leg in _legs(ids) if args.legs is None or args.legs in leg.name]
    if not legs:
        raise RuntimeError(f"no leg's name contains {args.legs!r}")
    async with contextlib.AsyncExitStack() as stack, harness.database_url() as dsn:
        process, other = await _start_handwritten(dsn)
        stack.callback(_stop, process)
        services = [("A kalends", url)]
        pids = [int(harness._SERVICE["pid"]), process.pid]
        pid_of = {url: pids[0], other: process.pid}
        if args.baseline:
            tree = stack.enter_context(_checkout(args.baseline))
            baseline, before = await _start_baseline(dsn, tree)
            stack.callback(_stop, baseline)
            services.append((f"A0 {args.baseline}", before))
            pids.append(baseline.pid)
            pid_of[before] = baseline.pid
        if _pin(*pids):
            print("servers pinned to core 1, the load generator to core 0", flush=True)
        for leg in legs:
            if leg.body_for is None:
                await _same_bodies(session, url, other, leg.path_for(0))
            else:
                for _label, base in _running(services, leg):
                    await _graphql_answers(session, base, leg)
        print("bodies byte-identical on every page; /graphql answers data", flush=True)
        results: list[Result] = []
        for round_ in range(args.rounds):
            for leg in legs:
                # Kalends' servers in turn first and second, so that neither is always
                # the one measured after the other.
                running = _running(services, leg)
                for label, base in [*(running if round_ % 2 == 0 else running[::-1]),
                                    ("B hand-written", other)]:
                    hand = label.startswith("B ")
                    scenario = Scenario(
                        f"{label} {leg.name} #{round_ + 1}",
                        _url_for(base, leg.handwritten if hand else leg.path_for),
                        method="GET" if hand else leg.method,
                        body_for=None if hand else leg.body_for)
                    results.append(await harness.measure(
                        session, scenario, args.warmup, args.requests, args.concurrency,
                        profiled=base == url and round_ == 0, cpu_of=pid_of[base]))
    print()
    for leg in legs:
        b = _of(results, "B ", leg.name)
        line = [f"{leg.name:<34}"]
        for label, _ in _running(services, leg):
            prefix = label.split()[0] + " "
            ratio = statistics.median(
                x.rps / y.rps for x, y in zip(_of(results, prefix, leg.name), b, strict=True))
            line.append(f"{label} / hand-written req/s: {ratio:.2f}")
        print("  ".join(line))
        line = [f"{'':<34}"]
        for label, _ in [*_running(services, leg), ("B hand-written", other)]:
            per = [r.cpu_per_request for r in _of(results, label.split()[0] + " ", leg.name)]
            known = [p for p in per if p is not None]
            if known:
                line.append(f"{label.split()[0]} CPU {statistics.median(known) * 1e6:.0f} us/req")
        print("  ".join(line))
    return results


def _running(services: list[tuple[str, str]], leg: _Leg) -> list[tuple[str, str]]:
    return [(label, base) for label, base in services
            if not (leg.persisted and label.startswith("A0"))]


def _url_for(base: str, path_for: Callable[[int], str]) -> Callable[[int], str]:
    return lambda i: f"{base}{path_for(i)}"


def _of(results: list[Result], prefix: str, name: str) -> list[Result]:
    return [r for r in results if r.name.startswith(prefix) and f" {name} #" in r.name]


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=10)


def main() -> int:
    args = harness.options(__doc__ or "", {"events": (150, "events to seed"),
                                           "rounds": (2, "A B rounds")},
                           baseline=(None, "a commit or another Kalends checkout, measured "
                                           "as A0"),
                           legs=(None, "only the requests whose name contains this text "
                                       "(`listEvents(20) kept`, `GET`)"))
    return harness.run(_benchmark, args, f"{args.events} events, {args.rounds} rounds")


if __name__ == "__main__":
    sys.exit(main())
