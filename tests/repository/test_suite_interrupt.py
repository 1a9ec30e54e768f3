"""One Ctrl-C stops a test run, and the servers it started (issue: the first SIGINT
used to cancel only the running test, and the run went on until a second one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

# slow: a pytest run of its own, interrupted (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workers", [
    # In this process: a single file runs here, as `-n0` and `-p no:xdist` do.
    (),
    # On pytest-xdist's workers, as the whole suite runs (tests/conftest.py): the
    # terminal's SIGINT reaches the workers too, and each stops its own servers.
    ("-n", "2", "--dist", "loadfile"),
], ids=["in-process", "xdist"])
def test_one_ctrl_c_stops_the_run_and_its_servers(tmp_path: Path, workers: tuple[str, ...]
                                                  ) -> None:
    if workers:
        pytest.importorskip("xdist")  # the test extra's; -p no:xdist alone leaves it installed
    ready = tmp_path / "ready"
    # Not this run's xdist worker's variables: the probe's run is a session of its own.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("PYTEST_XDIST_")}
    env.update(KALENDS_PROBE_READY=str(ready), KALENDS_TEST_DATA_DIR=str(tmp_path))
    env.pop("DATABASE_URL", None)  # the probe starts an embedded server of its own
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers,
         str(TESTS / "probe_interrupt.py")],
        cwd=TESTS.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():  # the session is up: server, database, test waiting
            assert run.poll() is None, run.stdout.read().decode() if run.stdout else ""
            assert time.monotonic() < deadline, "the probe never got ready"
            time.sleep(0.05)
        postgres = [p for p in psutil.process_iter(["cmdline"])
                    if str(tmp_path) in " ".join(p.info["cmdline"] or ())]
        assert postgres, "the probe's embedded PostgreSQL is not running"
        os.killpg(run.pid, signal.SIGINT)  # one Ctrl-C, as a terminal sends it: to the group
        output = run.communicate(timeout=30)[0].decode()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 2, output  # pytest's "interrupted"
    assert "KeyboardInterrupt" in output
    assert not Path(f"{ready}.after").exists(), "the run went on past the Ctrl-C"
    gone = psutil.wait_procs(postgres, timeout=30)[1]
    assert not gone, f"left running: {gone}"
