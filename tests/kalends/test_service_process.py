"""The real `kalends serve` as operators run it: no DATABASE_URL, the embedded PostgreSQL.

Every test starts the service as a subprocess on a free port with a fresh
`KALENDS_DATA_DIR` (never under /root), bounds every wait, and in a `finally`
kills whatever it started: the service's process group and any postgres
serving that data directory.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest
from processes import (
    ROOT,
    START_TIMEOUT,
    STOP_TIMEOUT,
    Psql,
    Service,
    alive,
    assert_postgres_stopped,
    free_port,
    handle_pids,
    json_lines,
    kill_postgres,
    postgres_of,
    profile_request,
    read_all,
    request,
    service_env,
    start,
    wait_listening,
    wait_refused,
    wait_until_gone,
)

# slow: kalends serve processes (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow


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
    assert admin.stderr == b"", admin.stderr.decode()  # it found the server
    api_key = json.loads(admin.stdout)["api_key"]

    # Another data directory: no server runs there, and the command says so in one line
    # (its key belongs to a database the running server never reads).
    other = data_dir / "other"
    try:
        stray = subprocess.run(
            [sys.executable, "-m", "kalends", "admin", "create-user",
             "--email", f"stray-{secrets.token_hex(4)}@example.com"],
            cwd=ROOT, env=service_env(other), capture_output=True, timeout=60, check=False,
        )
        assert stray.returncode == 0, stray.stderr.decode()[-4000:]
        [line] = stray.stderr.decode().splitlines()
        assert line.startswith("kalends: no server is running on the data directory "
                               f"{other} (KALENDS_DATA_DIR)"), line
        stray_key = json.loads(stray.stdout)["api_key"]
        assert request(port, "GET", "/v1/profiles",
                       {"Authorization": f"Bearer {stray_key}"})[0] == 401
    finally:
        kill_postgres(other / "pg")
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
        # Draining: not ready any more, yet still answering, while the request is in flight.
        deadline = time.monotonic() + 10
        while (ready := request(port, "GET", "/readyz"))[0] == 200:
            assert time.monotonic() < deadline, "/readyz still 200 after SIGTERM"
            time.sleep(0.05)
        status, body, headers = ready
        assert status == 503 and json.loads(body)["error"]["code"] == "service_unavailable"
        assert headers["Connection"] == "close"
        assert request(port, "GET", "/healthz")[0] == 200
        time.sleep(0.5)
        assert service.proc.poll() is None, "exited with a request in flight"
        assert request(port, "GET", "/readyz")[0] == 503

        psql.send("ROLLBACK;")  # let the request finish
        raw = read_all(sock)
    status_line, _, rest = raw.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 201"), raw[:2000]
    head, _, payload = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()  # the client reconnects elsewhere
    created = json.loads(payload)
    assert created["id"].startswith("prf_"), created
    wait_refused(port)  # nothing in flight: the port closes

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


def test_sigterm_drains_for_the_configured_time(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    """KALENDS_DRAIN_SECONDS: after SIGTERM, /readyz is 503 and requests are still served
    that long, so that a load balancer stops routing before the port closes."""
    service = start(services, data_dir, tmp_path,
                    env=service_env(data_dir, KALENDS_DRAIN_SECONDS="2"))
    port = service.port
    assert request(port, "GET", "/readyz")[0] == 200
    stopped = time.monotonic()
    service.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert request(port, "GET", "/readyz")[0] == 503
    status, _, headers = request(port, "GET", "/openapi.json")
    assert status == 200 and headers["Connection"] == "close"
    wait_refused(port, timeout=10)
    assert time.monotonic() - stopped >= 1.9
    assert service.proc.wait(timeout=STOP_TIMEOUT) == 0
    # A second SIGTERM cuts the drain short.
    second = start(services, data_dir, tmp_path,
                   env=service_env(data_dir, KALENDS_DRAIN_SECONDS="60"))
    second.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert request(second.port, "GET", "/readyz")[0] == 503
    began = time.monotonic()
    assert second.stop() == 0
    assert time.monotonic() - began < 10


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
    ("admin", "direct"),
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
    args = {"serve": ["serve", "--port", str(port)], "migrate": ["migrate"],
            "admin": ["admin", "create-user", "--email", "root@example.com"]}[command]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "kalends", *args], cwd=ROOT, env=env, capture_output=True,
            timeout=30, check=False,
        )
    finally:
        if spelling == "symlink":
            link.unlink()
    stderr = proc.stderr.decode()
    # One line naming the problem, as for every mistake that stops a start.
    assert proc.returncode == 2, stderr
    [line] = stderr.splitlines()
    assert line.startswith("kalends: KALENDS_DATA_DIR=/root/"), line
    assert "lies under /root" in line, line
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
