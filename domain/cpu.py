"""CPU-bound work (recurrence expansion, iCalendar rendering) beside the event loop,
so that no request waits for another's computing (docs/api-choices.md, "Bounded work").

Python threads share one interpreter lock, so more threads never compute faster; what
they cost is the event loop's turn at the lock. Each time the loop comes back from
waiting on its sockets it must take the lock from a computing thread, which gives it
up only every switch interval (5 ms by default): with four computing threads a
`/healthz` of a few loop turns took 100 ms at p99 (bench/flood.py). So the work runs
on one thread, and the service shortens the switch interval to `SWITCH_INTERVAL`
(`configure`), which costs a computing thread little and gives the loop its turn
within a millisecond or so. With two computing threads a lock the loop asked for
could go to the other one instead: four of the worst GraphQL documents the limits
allow held `/healthz` 500-650 ms at p99, 180-200 ms with one (bench/worst_documents.py).
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

WORKERS = 1
SWITCH_INTERVAL = 0.001

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="kalends-cpu")


def configure() -> None:
    """Give the event loop its turn at the interpreter lock within `SWITCH_INTERVAL`."""
    sys.setswitchinterval(SWITCH_INTERVAL)


async def run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on the CPU pool, awaited."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, functools.partial(fn, *args, **kwargs))
