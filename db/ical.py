"""What the iCalendar writers (domain/notify/, domain/connected/) read and record
about single occurrences, beside db/events.py (the events) and db/occurrences.py
(their rows): a feed's occurrences version, attendee e-mail sent per occurrence, and
the overrides written with each pushed copy (migration 0029)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from db.database import Database, Tx


async def feed_occurrences_version(db: Database, profile_id: str
                                   ) -> tuple[int, datetime | None]:
    """How many `event_occurrences` rows the profile's public events have, and their
    last change: with the events' own (`db.events.feed_version`), what a feed's ETag
    depends on. A row removed changes the number, a row written the time."""
    row = await db.fetchrow(
        """
        SELECT count(*) AS rows, max(o.updated_at) AS changed
        FROM event_occurrences o JOIN events e ON e.id = o.event_id
        WHERE e.profile_id = $1 AND NOT e.is_private
        """,
        profile_id,
    )
    assert row is not None  # an aggregate always answers
    return int(row["rows"]), row["changed"]


async def last_occurrence_mail(db: Database | Tx, event_id: str, slot: str
                               ) -> tuple[int, str] | None:
    """The SEQUENCE and fingerprint of the last message sent about occurrence `slot`."""
    row = await db.fetchrow(
        "SELECT sequence, fingerprint FROM attendee_mail_sent_occurrences"
        " WHERE event_id = $1 AND slot = $2 ORDER BY sequence DESC, sent_at DESC LIMIT 1",
        event_id, slot,
    )
    return None if row is None else (int(row["sequence"]), str(row["fingerprint"]))


async def occurrence_mail_sent(db: Database | Tx, event_id: str, slot: str, sequence: int,
                               method: str) -> set[str]:
    rows = await db.fetch(
        "SELECT address FROM attendee_mail_sent_occurrences WHERE event_id = $1"
        " AND slot = $2 AND sequence = $3 AND method = $4",
        event_id, slot, sequence, method,
    )
    return {r["address"] for r in rows}


async def record_occurrence_mail(db: Database | Tx, event_id: str, slot: str, sequence: int,
                                 method: str, fingerprint: str, address: str) -> None:
    await db.execute(
        "INSERT INTO attendee_mail_sent_occurrences"
        " (event_id, slot, sequence, method, fingerprint, address)"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        event_id, slot, sequence, method, fingerprint, address,
    )


async def pushed_overrides(db: Database | Tx, calendar_id: str) -> dict[str, set[str]]:
    """The slots of the overrides written with each copy pushed to the calendar, by event."""
    rows = await db.fetch(
        "SELECT event_id, slot FROM external_push_overrides WHERE calendar_id = $1",
        calendar_id,
    )
    found: dict[str, set[str]] = {}
    for r in rows:
        found.setdefault(r["event_id"], set()).add(r["slot"])
    return found


async def record_pushed_overrides(db: Database, calendar_id: str, event_id: str,
                                  slots: Iterable[str]) -> None:
    """The slots of the overrides the copy of `event_id` was just written with (its
    `external_pushes` row written first)."""
    async with db.transaction() as tx:
        await tx.execute(
            "DELETE FROM external_push_overrides WHERE calendar_id = $1 AND event_id = $2",
            calendar_id, event_id)
        await tx.execute(
            "INSERT INTO external_push_overrides (calendar_id, event_id, slot)"
            " SELECT $1, $2, unnest($3::text[])",
            calendar_id, event_id, sorted(slots))
