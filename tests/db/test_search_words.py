"""Search's common words (db/search.py: `search_title_words`, `WordsWatch`) follow the
statistics: once `events` is analyzed after a bulk load, the list is refreshed from
the newer statistics and a word the load made common is walked in rank order; without
a newer analyze nothing is refreshed.

Each test has a database of its own (a bulk load, autovacuum off on `events` so that
only the test's ANALYZE gathers statistics).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import orjson
import pytest
from conftest import migrated_database, own_server
from test_search import _index_rows, word

from db import search as search_store
from db.database import Database

VIEWER = "usr_" + "e" * 32
EVENTS = 20_000
# A word in 1 title in 8: 2,500 titles, past TITLE_CAP, common enough to walk.
_SEED = """
ALTER TABLE events SET (autovacuum_enabled = false, toast.autovacuum_enabled = false);
INSERT INTO users (id, email) VALUES ('usr_' || repeat('e', 32), 'words@example.com');
INSERT INTO organizations (id, name) VALUES ('org_' || repeat('e', 32), 'Words');
INSERT INTO profiles (id, organization_id, owner_user_id, platform_id, display_name)
SELECT 'prf_' || md5('p' || g), 'org_' || repeat('e', 32),
       'usr_' || repeat('e', 32), 'words-' || g, 'Studio ' || g
FROM generate_series(1, 20) g;
"""
_LOAD = """
INSERT INTO events (id, profile_id, title, start_time, start_timezone, slug)
SELECT 'evt_' || md5('$2' || g), 'prf_' || md5('p' || (1 + g % 20)),
       'Talk t' || g % 3000 || ' on s' || g * 13 % 2000
                 || CASE WHEN g % 8 = 0 THEN ' $1' ELSE '' END,
       now() - interval '1 year' + (g * 7919 % 20000) * interval '30 minutes', 'UTC',
       '$2-' || g
FROM generate_series(1, $3) g;
"""


def _load(common: str) -> str:
    return _LOAD.replace("$1", common).replace("$2", word()).replace("$3", str(EVENTS))


@pytest.fixture
def words_dsn(database_url: str) -> Iterator[str]:
    with migrated_database(database_url, prefix="kalends_words") as dsn:
        yield dsn


async def _listed(conn: Any, lexeme: str) -> int | None:
    return await conn.fetchval(  # type: ignore[no-any-return]
        "SELECT titles FROM search_title_words WHERE lexeme = $1", lexeme)


async def _first_page(conn: Any, text: str) -> tuple[Any, list[Any]]:
    """Tier 3's statement for `text`, as a page of 21 reads it, and its plan."""
    statement = search_store.sql_titles(search_store.KINDS, False, False)
    args = (text, False, VIEWER, 21, search_store.TITLE_CAP)
    async with conn.transaction():
        await conn.execute(search_store.GENERIC)
        [row] = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, *args)
        found = await conn.fetch(statement, *args)
    return orjson.loads(row[0])[0]["Plan"], found


@pytest.mark.slow
async def test_the_list_follows_a_newer_analyze_and_only_that(words_dsn: str) -> None:
    common = word()
    db = await Database.connect(words_dsn, min_size=1, max_size=2)
    conn = await asyncpg.connect(words_dsn)
    try:
        await conn.execute(_SEED)
        watch = search_store.WordsWatch()
        # Nothing analyzed yet: the list is what the statistics say (nothing).
        assert await watch.check(db) is False

        # A bulk load, not yet analyzed: nothing is refreshed, and the word is not
        # walked (its title matches are read unordered, more than TITLE_CAP: capped).
        await conn.execute(_load(common))
        assert await watch.check(db) is False
        assert await _listed(conn, common) is None
        _, found = await _first_page(conn, common)
        assert found[0]["capped"], found

        # ANALYZE: the next look refreshes the list, which now holds the word...
        await conn.execute("ANALYZE events")
        assert await watch.check(db) is True
        titles = await _listed(conn, common)
        assert titles is not None and titles > search_store.TITLE_CAP, titles
        # ... and search walks it: the page is found in rank order in the first
        # statement (with 2,500 matches, not capped means walked), without reading
        # the GIN index of titles.
        plan, found = await _first_page(conn, common)
        assert not found[0]["capped"], found
        assert len([r for r in found if r["kind"] == "event"]) == 21
        assert _index_rows(plan, "events_title_search") == 0, plan

        # No newer analyze, nothing refreshed: another load's word stays unlisted.
        other = word()
        await conn.execute(_load(other))
        assert await watch.check(db) is False
        assert await _listed(conn, other) is None
        # Another process's first look finds the list as the statistics say: it
        # leaves it be.
        assert await search_store.WordsWatch().check(db) is False
        assert await _listed(conn, other) is None
        # Until the table is analyzed again.
        await conn.execute("ANALYZE events")
        assert await watch.check(db) is True
        assert (await _listed(conn, other) or 0) > search_store.TITLE_CAP
        assert await watch.check(db) is False
    finally:
        await conn.close()
        await db.close()


@pytest.mark.slow
def test_the_service_walks_a_loaded_word_soon_after_its_analyze(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running service, not a direct call: a word a bulk load made common is in
    the list within seconds of the ANALYZE (its look every WATCH_SECONDS, shortened
    here), not at an hourly round."""
    monkeypatch.setattr(search_store, "WATCH_SECONDS", 0.5, raising=False)
    common = word()

    async def load_and_wait(dsn: str) -> int | None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(_SEED)
            await conn.execute(_load(common))
            await conn.execute("ANALYZE events")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                titles = await _listed(conn, common)
                if titles is not None:
                    return titles
                await asyncio.sleep(0.2)
            return None
        finally:
            await conn.close()

    with own_server(database_url, "kalends_words_svc") as server:
        dsn = server.db.dsn
        assert dsn is not None
        titles = asyncio.run(load_and_wait(dsn))
    assert titles is not None and titles > search_store.TITLE_CAP, titles
