"""The dashboard graph's fields (docs/graphql.md, "The dashboard graph"): the lists under each
object, an event's occurrences and a profile's RSVP summary. Each list has the visibility of
the REST read that lists the same things; the rules are the ones those reads
use, and what is new is decided in `domain.dashboard`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Any, get_args
from zoneinfo import ZoneInfo

import asyncpg

from core.errors import ApiError, forbidden
from db import calendar_events, follows, profiles, rsvps, series
from db import events as event_store
from db.nested import Listing
from domain import agenda, dashboard, expansion, ids
from domain import follows as follow_rules
from domain import occurrences as occurrence_rules
from domain import profiles as profile_rules
from domain import rsvps as rsvp_rules
from domain.pagination import COUNT_CAP
from graph.connections import Connection
from graph.context import Context
from graph.scalars import Timestamp
from graph.types import Event, EventOccurrence, Page, Profile, Rsvp, RsvpBucket, Series

_ALL = "*"
"""The parent of the one list that has none (`Query.events` with filters)."""
MAX_PROFILE_IDS = 100


# ---------------------------------------------------------------------------
# Events: a profile's, a series', or all visible ones, kept by a Filter


async def _meet(ctx: Context, rows: Sequence[asyncpg.Record], f: event_store.Filter
                ) -> list[bool]:
    """Which of `rows` meet the filter's window: the statement decided one-off events;
    recurring ones are expanded, together, on the request's budget."""
    if f.start is None or f.end is None:
        return [True] * len(rows)
    recurring = [r for r in rows if r["recurrence_rule"] is not None]
    if not recurring:
        return [True] * len(rows)
    r = dashboard.Range(f.start, f.end)
    changes = await _changes(ctx, recurring, [r])
    found = iter(await expansion.run(dashboard.events_meet, recurring, r, ctx.budget, changes))
    return [next(found) if r["recurrence_rule"] is not None else True for r in rows]


def _events(scope: event_store.Scope) -> Connection[event_store.Filter]:
    def select(ctx: Context, f: event_store.Filter) -> tuple[Listing, tuple[Any, ...]]:
        return f.select(scope, ctx.viewer.user_id)

    async def counts(ctx: Context, parents: Sequence[str], f: event_store.Filter) -> list[int]:
        cap = COUNT_CAP + 1
        if f.start is None or f.end is None:
            listing, args = select(ctx, f)
            return await listing.counts(ctx.db, parents, cap, *args)
        # One-off events are decided by SQL; recurring ones by their expansion.
        one_off, one_off_args = select(ctx, replace(f, recurring=False))
        recurring, recurring_args = select(ctx, replace(f, recurring=True))
        totals, candidates = await asyncio.gather(
            one_off.counts(ctx.db, parents, cap, *one_off_args),
            recurring.pages(ctx.db, [(p, None, None) for p in parents], cap, *recurring_args))
        # Every candidate is expanded (exact), or the count is `expansion_limit`.
        met = iter(await _meet(ctx, [r for rows in candidates for r in rows], f))
        return [n + sum(next(met) for _ in rows)
                for n, rows in zip(totals, candidates, strict=True)]

    return Connection(f"events:{scope}", select, keep=_meet, counts=counts)


_PROFILE_EVENTS = _events("profile")
_SERIES_EVENTS = _events("series")
_ALL_EVENTS = _events("all")


def _event_filter(start: str | None, end: str | None, status: str | None,
                  profile_ids: Sequence[str] | None = None) -> event_store.Filter:
    r = dashboard.parse_range(start, end)
    if profile_ids is not None and len(profile_ids) > MAX_PROFILE_IDS:
        raise ApiError("invalid_field",
                       f"`profile_ids` must list at most {MAX_PROFILE_IDS} profiles.",
                       param="profile_ids")
    return event_store.Filter(
        profile_ids=tuple(dict.fromkeys(ids.parse("prf", p, param="profile_ids")
                                        for p in profile_ids))
        if profile_ids is not None else None,
        status=dashboard.check_status(status),
        start=r.start if r else None, end=r.end if r else None,
    )


def _key(base: str, f: event_store.Filter) -> str:
    """Cursors of a filtered list are its own; unfiltered, they are the REST list's."""
    if f == event_store.Filter():
        return base
    return f"{base}?{f.profile_ids}:{f.status}:{f.start}:{f.end}"


async def profile_events(ctx: Context, profile_id: str, limit: int, cursor: str | None,
                         start: str | None, end: str | None, status: str | None
                         ) -> Page[Event]:
    f = _event_filter(start, end, status)
    return await _PROFILE_EVENTS.page(ctx, profile_id, _key(f"profile-events:{profile_id}", f),
                                      limit, cursor, f, Event.from_row)


async def series_events(ctx: Context, series_id: str, limit: int, cursor: str | None
                        ) -> Page[Event]:
    return await _SERIES_EVENTS.page(ctx, series_id, f"series-events:{series_id}", limit,
                                     cursor, event_store.Filter(), Event.from_row)


async def events(ctx: Context, limit: int, cursor: str | None, start: str | None,
                 end: str | None, status: str | None, profile_ids: Sequence[str] | None
                 ) -> Page[Event]:
    """`Query.events` with filters."""
    f = _event_filter(start, end, status, profile_ids)
    return await _ALL_EVENTS.page(ctx, _ALL, _key("events", f), limit, cursor, f,
                                  Event.from_row)


# ---------------------------------------------------------------------------
# Profiles of an organization, series and followers of a profile, RSVPs of an event


def _by_viewer(listing: Listing) -> Callable[[Context, None], tuple[Listing, tuple[Any, ...]]]:
    """A listing whose one parameter is the viewer."""
    return lambda ctx, _: (listing, (ctx.viewer.user_id,))


def _plain(listing: Listing) -> Callable[[Context, None], tuple[Listing, tuple[Any, ...]]]:
    """A listing without parameters of its own."""
    return lambda ctx, _: (listing, ())


_ORGANIZATION_PROFILES: Connection[None] = Connection(
    "organization-profiles", _by_viewer(profiles.OF_ORGANIZATION))
_PROFILE_SERIES: Connection[None] = Connection("profile-series", _by_viewer(series.OF_PROFILE))
_FOLLOWERS: Connection[None] = Connection("profile-followers", _plain(follows.FOLLOWERS))
CALENDAR_EVENTS: Connection[None] = Connection("calendar-events",
                                               _plain(calendar_events.OF_CALENDAR))
"""A calendar's stored events (graph/calendars.py: `Calendar.events`)."""


async def organization_profiles(ctx: Context, organization_id: str, limit: int,
                                cursor: str | None) -> Page[Profile]:
    return await _ORGANIZATION_PROFILES.page(
        ctx, organization_id, f"organization-profiles:{organization_id}", limit, cursor, None,
        Profile.from_row)


async def profile_series(ctx: Context, profile_id: str, limit: int, cursor: str | None
                         ) -> Page[Series]:
    return await _PROFILE_SERIES.page(ctx, profile_id, f"profile-series:{profile_id}", limit,
                                      cursor, None, Series.from_row)


async def profile_followers(ctx: Context, profile: asyncpg.Record, limit: int,
                            cursor: str | None) -> Page[Any]:
    from graph.follows import Follower  # graph.follows imports the types this module uses

    follow_rules.check_followers_visible(profile, ctx.viewer)
    return await _FOLLOWERS.page(ctx, profile["id"], f"profile-followers:{profile['id']}",
                                 limit, cursor, None, Follower.from_row)


_RsvpSpec = tuple[str | None, str | None]
"""(only this user's RSVPs, or everyone's; only this status, or all)."""
_EVENT_RSVPS: Connection[_RsvpSpec] = Connection(
    "event-rsvps", lambda ctx, spec: rsvps.of_event(*spec))
_RSVP_STATUSES = get_args(rsvp_rules.Status)


async def event_rsvps(ctx: Context, event: asyncpg.Record, limit: int, cursor: str | None,
                      status: str | None) -> Page[Rsvp]:
    if status is not None and status not in _RSVP_STATUSES:
        raise ApiError("invalid_field", "`status` must be going, maybe, not_going or waitlist.",
                       param="status", details={"value": status})
    only = None if profile_rules.administers(event, ctx.viewer) else ctx.viewer.user_id
    key = f"rsvps:{event['id']}" if status is None else f"rsvps:{event['id']}?{status}"
    return await _EVENT_RSVPS.page(ctx, event["id"], key, limit, cursor, (only, status),
                                   Rsvp.from_row)


# ---------------------------------------------------------------------------
# Occurrences and the RSVP summary


class _Occurrences:
    """One event's occurrences asked for: a loader's key, equal to another for the
    same event, window and zone (hashing the whole row cost as much as the rest)."""

    __slots__ = ("event", "key", "range", "tz")

    def __init__(self, event: asyncpg.Record, r: dashboard.Range, tz: ZoneInfo) -> None:
        self.event, self.range, self.tz = event, r, tz
        self.key = (event["id"], r, tz.key)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Occurrences) and other.key == self.key


async def event_occurrences(ctx: Context, event: asyncpg.Record, start: str, end: str,
                            timezone: str | None) -> list[EventOccurrence]:
    r = dashboard.parse_range(start, end, max_days=dashboard.MAX_OCCURRENCE_DAYS,
                              required=True)
    assert r is not None
    tz = agenda.resolve_zone(timezone, ctx.viewer.timezone)
    if ctx.budget.exhausted:
        raise expansion.exhausted()  # at once: no hop to the CPU pool for an error
    # Every event of the document in one hop beside the event loop (a page of 100
    # events is one batch, not 100), the answer's objects made there too.
    batch = ctx.loaders.batch("occurrences", lambda asks: _occurrences(ctx, asks))
    found: list[EventOccurrence] = await batch.load(_Occurrences(event, r, tz))
    return found


async def _occurrences(ctx: Context, asks: Sequence[_Occurrences]
                       ) -> list[list[EventOccurrence]] | list[ApiError]:
    changes = await _changes(ctx, [ask.event for ask in asks], [ask.range for ask in asks])
    return await expansion.run(_expand_each, asks, ctx.budget, changes)


async def _changes(ctx: Context, rows: Sequence[asyncpg.Record],
                   ranges: Sequence[dashboard.Range]) -> expansion.Changes:
    """The changes of the occurrences of `rows` that may matter to any of `ranges`
    (docs/occurrences.md): one statement for a whole batch, read once per request for
    each event and window, so that a window's page, its count and its events'
    occurrences share one read."""
    start, end = min(r.start for r in ranges), max(r.end for r in ranges)
    lows = expansion.lower_bounds(rows, start)
    if not lows:
        return expansion.NO_CHANGES
    loader = ctx.loaders.keyed("occurrence-changes", lambda keys: _read_changes(ctx, keys))
    found = await loader.load_many([(event_id, low, start, end)
                                    for event_id, low in lows.items()])
    return {event_id: own for event_id, own in zip(lows, found, strict=True) if own}


_ChangesKey = tuple[str, datetime, datetime, datetime]
"""(event, its lower bound, window start, window end)."""


async def _read_changes(ctx: Context, keys: Sequence[_ChangesKey]
                        ) -> list[Sequence[Mapping[str, Any]]]:
    windows: dict[tuple[datetime, datetime], dict[str, datetime]] = {}
    for event_id, low, start, end in keys:
        windows.setdefault((start, end), {})[event_id] = low
    read = {(start, end): await expansion.read_changes(
        ctx.db, lows, start, end, start.date(), end.date() + timedelta(days=1))
        for (start, end), lows in windows.items()}
    return [read[(start, end)].get(event_id, ()) for event_id, _, start, end in keys]


def _expand_each(asks: Sequence[_Occurrences], budget: expansion.Budget,
                 changes: expansion.Changes) -> list[list[EventOccurrence]] | list[ApiError]:
    """Each ask's occurrences; once the budget is spent, the error for every ask of
    the batch (the document asked for more than it may: none of its lists is made
    into an answer, which would cost the event loop as much again)."""
    spans: list[list[expansion.Span]] = []
    for ask in asks:
        try:
            spans.append(dashboard.occurrence_spans(ask.event, ask.range, ask.tz, budget,
                                                    changes))
        except ApiError:
            # One error each: an exception raised by 500 coroutines would gather
            # 500 frames in its one traceback.
            return [expansion.exhausted() for _ in asks]
    # Only a batch within the budget is made into answers.
    return [[_occurrence(s, ask.event, ask.tz) for s in found[:dashboard.MAX_OCCURRENCES]]
            for ask, found in zip(asks, spans, strict=True)]


def _occurrence(s: expansion.Span, event: asyncpg.Record, tz: ZoneInfo) -> EventOccurrence:
    """The occurrence as it stands (`domain.occurrences`), with where it lies on the
    asked zone's clock (`start`, `local_start`); its own local times are on its zones."""
    made: EventOccurrence = EventOccurrence.of(occurrence_rules.describe(event, s))
    made.start, made.end = Timestamp(s.start), Timestamp(s.end) if s.end is not None else None
    made.local_start = agenda.local(s.start, tz)
    made.local_end = agenda.local(s.end, tz) if s.end is not None else None
    return made


async def rsvp_summary(ctx: Context, profile: asyncpg.Record, start: str, end: str,
                       bucket: str, timezone: str | None, status: str | None
                       ) -> list[RsvpBucket]:
    if not profile_rules.administers(profile, ctx.viewer):
        raise forbidden("Only the profile's administrators may read its RSVP summary.")
    r = dashboard.parse_range(start, end, required=True)
    assert r is not None
    kind = dashboard.check_bucket(bucket)
    status = dashboard.check_status(status)
    tz = agenda.resolve_zone(timezone, ctx.viewer.timezone)
    starts = dashboard.bucket_starts(r, tz, kind)
    # One summary of a document at a time: once one has spent the request's budget,
    # the others answer at once, without reading the rows they could not expand.
    async with ctx.expanding:
        return await _summary(ctx, profile, r, tz, kind, starts, status)


async def _summary(ctx: Context, profile: asyncpg.Record, r: dashboard.Range, tz: ZoneInfo,
                   kind: dashboard.Bucket, starts: list[date], status: str | None
                   ) -> list[RsvpBucket]:
    if ctx.budget.exhausted:
        raise expansion.exhausted()
    grouped = await event_store.summary_one_off(ctx.db, profile["id"], r.start, r.end, tz.key,
                                                kind, status)
    recurring = await event_store.summary_recurring(ctx.db, profile["id"], r.end, status,
                                                    dashboard.MAX_SUMMARY_RECURRING + 1)
    if len(recurring) > dashboard.MAX_SUMMARY_RECURRING:
        raise expansion.exhausted()  # exact or an error: never the first few
    changes = await _changes(ctx, recurring, [r])
    buckets = await expansion.run(
        dashboard.summarize, starts, [(g["bucket"], g["events"], _counts(g)) for g in grouped],
        [(row, _counts(row)) for row in recurring], r, tz, kind, ctx.budget, changes, status)
    return [RsvpBucket(start=b.start, events=b.events, going=b.going, maybe=b.maybe,
                       not_going=b.not_going, waitlist=b.waitlist,
                       total_attendees=b.total_attendees) for b in buckets]


def _counts(row: asyncpg.Record) -> dashboard.Counts:
    return dashboard.Counts(row["going"], row["maybe"], row["not_going"], row["waitlist"],
                            row["total_attendees"])

