"""A large profile in seconds, for the tests and benchmarks that need one
(tests/domain/test_event_slugs.py, bench/creates.py): copies of an event's row
by SQL, as the service would have written them."""

from __future__ import annotations

from typing import Any


async def copies_of_event(db: Any, event_id: str, count: int, title: str, day: str) -> None:
    """`count` copies of the row of the event `event_id`, each with an ID of its own, the
    title `{title} {n}` and the slug the service derives from that title on `day`
    (YYYY-MM-DD) for a `title` of one word, `{title}-{n}-{day}` lowercased, n from 1 to
    `count`; then ANALYZE. `db`: a database or a connection (`fetch`, `execute`)."""
    columns = [
        r["column_name"]
        for r in await db.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'events'"
            " AND is_generated = 'NEVER' AND column_name NOT IN ('id', 'slug', 'title')"
        )
    ]
    listed = ", ".join(columns)
    await db.execute(
        f"INSERT INTO events (id, slug, title, {listed})"
        " SELECT 'evt_' || md5(e.id || g), lower($3::text) || '-' || g || '-' || $4::text,"
        f" $3::text || ' ' || g, {listed}"
        " FROM events e, generate_series(1, $2) g WHERE e.id = $1",
        event_id,
        count,
        title,
        day,
    )
    await db.execute("ANALYZE events")
