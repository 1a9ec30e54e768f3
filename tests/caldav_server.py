"""A real CalDAV server for tests: Radicale (PyPI) on a loopback port, with
htpasswd authentication and its own storage folder; stopped and started again
at will (to test a provider that goes away), with the same data."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import caldav
from processes import free_port, request


class Radicale:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._users = folder / "users"
        self._config = folder / "config"
        self._log = folder / "radicale.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._users.write_text("")
        self._config.write_text(
            f"""[server]
hosts = 127.0.0.1:{self.port}
[auth]
type = htpasswd
htpasswd_filename = {self._users}
htpasswd_encryption = plain
[storage]
filesystem_folder = {folder / "collections"}
[rights]
type = owner_only
[logging]
level = warning
"""
        )

    def set_password(self, user: str, password: str) -> None:
        lines = [line for line in self._users.read_text().splitlines()
                 if not line.startswith(user + ":")]
        lines.append(f"{user}:{password}")
        self._users.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        log = self._log.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "radicale", "--config", str(self._config)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                request(self.port, "GET", "/.web/", timeout=1)
                return
            if self._process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"Radicale did not start:\n{self._log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def client(self, user: str, password: str) -> caldav.DAVClient:
        """An independent CalDAV client: the "other device" of the tests."""
        return caldav.DAVClient(url=self.url + "/", username=user, password=password)
