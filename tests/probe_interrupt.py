"""Run only by tests/repository/test_suite_interrupt.py (its name is not collected): a session whose
test waits, with the live server and the embedded PostgreSQL started, until a Ctrl-C."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any


async def test_waits_for_a_ctrl_c(live_server: Any) -> None:
    Path(os.environ["KALENDS_PROBE_READY"]).write_text(live_server.url)
    await asyncio.sleep(120)


def test_never_reached_after_a_ctrl_c() -> None:
    Path(os.environ["KALENDS_PROBE_READY"] + ".after").write_text("the run went on")
