"""Derived event slugs under concurrency and at size: concurrent creates of one
title and day take base, base-2, ... base-N with no gap; other titles go on in
parallel; an explicit slug racing a derivation never yields a duplicate or a
500; and the lookup of taken suffixes reads only the slugs that can collide,
however many events the profile holds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import new_event, new_profile
from seeding import copies_of_event

NY = "America/New_York"
TIMED = {"title": "Jazz Night", "start_time": "2026-03-08T19:30", "start_timezone": NY}
BASE = "jazz-night-2026-03-08"


def _series(base: str, n: int) -> list[str]:
    return [base] + [f"{base}-{k}" for k in range(2, n + 1)]


async def _profile(api: Any, make_user: Any) -> tuple[Any, dict[str, Any]]:
    owner = await make_user()
    return owner, await new_profile(api, owner)


async def test_concurrent_creates_of_one_title_and_day_take_every_suffix(
        api: Any, make_user: Any) -> None:
    owner, profile = await _profile(api, make_user)
    path = f"/v1/profiles/{profile['id']}/events"
    results = await asyncio.gather(*(api.post(path, owner, json=TIMED) for _ in range(24)))
    assert [status for status, _, _ in results] == [201] * 24, [b for _, b, _ in results]
    assert sorted(body["slug"] for _, body, _ in results) == sorted(_series(BASE, 24))


async def test_concurrent_creates_of_different_titles(api: Any, make_user: Any) -> None:
    owner, profile = await _profile(api, make_user)
    path = f"/v1/profiles/{profile['id']}/events"
    titles = ["Jazz Night", "Jazz Night 2", "Jazz", "Poetry"]
    bodies = [{**TIMED, "title": t} for t in titles for _ in range(6)]
    results = await asyncio.gather(*(api.post(path, owner, json=b) for b in bodies))
    assert [status for status, _, _ in results] == [201] * len(bodies), results
    slugs = sorted(body["slug"] for _, body, _ in results)
    expected = [s for base in ("jazz-night-2026-03-08", "jazz-night-2-2026-03-08",
                               "jazz-2026-03-08", "poetry-2026-03-08")
                for s in _series(base, 6)]
    assert slugs == sorted(expected)


async def test_an_explicit_slug_racing_derivations(api: Any, make_user: Any) -> None:
    """The explicit create wins its slug or gets 409; the derivations look again
    when it took theirs; together they leave no gap and no duplicate."""
    owner, profile = await _profile(api, make_user)
    path = f"/v1/profiles/{profile['id']}/events"
    for _ in range(5):
        explicit = [{**TIMED, "slug": f"{BASE}-{k}".upper()} for k in (2, 3, 5)]
        bodies = [TIMED] * 4 + explicit + [TIMED] * 4
        results = await asyncio.gather(*(api.post(path, owner, json=b) for b in bodies))
        statuses = [status for status, _, _ in results]
        assert all(s in (201, 409) for s in statuses), results
        assert statuses.count(201) >= 8, results  # every derivation gets a slug
        derived = [body["slug"] for (status, body, _), b in zip(results, bodies, strict=True)
                   if "slug" not in b]
        assert len(derived) == 8, results
    status, page, _ = await api.get(f"/v1/profiles/{profile['id']}/events", owner,
                                    params={"limit": "100"})
    assert status == 200, page
    slugs = [e["slug"].lower() for e in page["data"]]
    assert len(slugs) == len(set(slugs)), slugs
    assert sorted(slugs) == sorted(_series(BASE, len(slugs))), slugs


async def test_a_patch_to_a_derivable_slug_then_a_derivation(api: Any, make_user: Any) -> None:
    owner, profile = await _profile(api, make_user)
    first = await new_event(api, owner, profile, **TIMED)
    other = await new_event(api, owner, profile, **{**TIMED, "title": "Other"})
    status, body, _ = await api.patch(f"/v1/events/{other['id']}", owner,
                                      json={"slug": f"{BASE}-2"})
    assert status == 200, body
    third = await new_event(api, owner, profile, **TIMED)
    assert (first["slug"], third["slug"]) == (BASE, f"{BASE}-3")


# ---------------------------------------------------------------------------
# The lookup at size


class _Explain:
    """Stands in for the Database: runs the statement under EXPLAIN ANALYZE with
    sequential scans off, so the plan shows which index bounds the read."""

    def __init__(self, db: Any, plan_cache_mode: str) -> None:
        self.db = db
        self.mode = plan_cache_mode
        self.plan: Any = None

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        # A prepared statement, so that the generic plan is one with parameters
        # (EXPLAIN of a statement sent with its values plans them as constants).
        values = ", ".join("'" + str(a).replace("'", "''") + "'" for a in args)
        async with self.db.pool.acquire() as conn, conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off")
            await conn.execute(f"SET LOCAL plan_cache_mode = {self.mode}")
            await conn.execute(f"PREPARE slug_lookup AS {sql}")
            try:
                [row] = await conn.fetch(
                    f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE slug_lookup({values})")
            finally:
                await conn.execute("DEALLOCATE slug_lookup")
        self.plan = json.loads(row[0])
        return []


def _rows_read(node: dict[str, Any]) -> int:
    read = 0
    if node.get("Relation Name") == "events":  # a bitmap's index scan names none: not twice
        read += node["Actual Rows"] * node.get("Actual Loops", 1)
        read += node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    for child in node.get("Plans", ()):
        read += _rows_read(child)
    return read


async def test_the_slug_lookup_reads_only_the_slugs_that_can_collide(
        live_server: Any, api: Any, make_user: Any) -> None:
    """In a custom plan and in the generic plan a pooled prepared statement comes
    to after five runs (where starts_with with a parameter bounds no index)."""
    from db import events as store

    owner, profile = await _profile(api, make_user)
    for _ in range(3):
        template = await new_event(api, owner, profile, **TIMED)
    # Neighbours of the range in byte order: same start, not `base` nor `base-…`.
    for slug in (f"{BASE}x", f"{BASE}_2", "jazz-night-2026-03-0", "jazz-night-2026-03-09"):
        await new_event(api, owner, profile, **{**TIMED, "slug": slug})
    # 10,000 more on the same day: "Event 1" (slug event-1-2026-03-08), "Event 2", ...
    live_server.call(copies_of_event(live_server.db, template["id"], 10_000, "Event", "2026-03-08"))
    assert live_server.call(store.slugs_with_prefix(live_server.db, profile["id"], BASE)) == set(
        _series(BASE, 3))
    for mode in ("force_custom_plan", "force_generic_plan"):
        explain = _Explain(live_server.db, mode)
        live_server.call(store.slugs_with_prefix(explain, profile["id"], BASE))  # type: ignore[arg-type]
        [top] = explain.plan
        assert top["Plan"]["Actual Rows"] == 3, (mode, top)
        # Only the three collisions are read, of the profile's 10,007 events.
        assert _rows_read(top["Plan"]) <= 3, (mode, top)
        assert "events_profile_slug_prefix" in json.dumps(top), (mode, top)
