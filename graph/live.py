"""GraphQL subscriptions (docs/graphql.md, "Dashboards: `/graphql`"): a profile's event changes
and an event's RSVP stats, as they commit in any process (domain/notify/changes.py); served
over WebSocket by graph_bridge/ws.py.

Who may subscribe is who may read. `event_changes` is for those who administer the
profile, as its webhook endpoints are (a member of its organization is refused
`forbidden`, anyone else `resource_not_found`); `rsvp_stats` for anyone who can see
the event, as `event_rsvp_stats`. The rule is checked on subscribing and again at
each change, with loaders made afresh for it, so a caller who loses access gets
the error the read would now give, and nothing more.

Field names are snake_case, as everywhere else; the camelCase names they first had,
`eventChanges` and `rsvpStats`, stay as deprecated aliases of the same resolvers.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import strawberry

from core.errors import ApiError, not_found
from db import changes as change_store
from db import events as event_store
from db import rsvps as rsvp_store
from db.database import Database
from domain import ids
from domain import profiles as profile_rules
from domain.notify.changes import Change, Feed, Watch
from graph import occurrences
from graph.context import Context
from graph.dataloaders import Loaders
from graph.types import Event, Occurrence, RsvpStats


@dataclass
class LiveContext(Context):
    """A subscription's context: the process's change feed, and the watches to
    close when the subscription ends, however it ends."""

    feed: Feed = field(kw_only=True)
    _watches: list[Watch] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        # A change is read on the primary, after it committed (never older than it),
        # and a subscription writes nothing.
        self.db = self.services.db
        self.loaders = Loaders(self.db, self.viewer)

    def keep(self, watch: Watch) -> Watch:
        self._watches.append(watch)
        return watch

    def refresh(self) -> None:
        """Loaders cache for one request; each change is read afresh."""
        self.loaders = Loaders(self.db, self.viewer)

    def close(self) -> None:
        for watch in self._watches:
            watch.close()
        self._watches.clear()


Info = strawberry.Info[LiveContext, None]


@strawberry.type(description="A change to one of a profile's events.")
class EventChange:
    type: str = strawberry.field(description=(
        "The webhook event type: event.created, event.updated, event.cancelled, "
        "event.rescheduled, event.deleted, occurrence.updated, occurrence.cancelled or "
        "occurrence.restored."
    ))
    event: Event = strawberry.field(description=(
        "The event as getEvent shows it to the profile's owner, read after the change "
        "committed (so never older than it). For event.deleted, as it was just before; "
        "its series and rsvp_stats, read now, are empty."
    ))
    occurrence: Occurrence | None = strawberry.field(default=None, description=(
        "For occurrence.*: the occurrence as getEventOccurrence shows it, read after the "
        "change committed; null when it is no longer one of the event's."
    ))


async def _event_changes(info: Info, profile_id: strawberry.ID) -> AsyncIterator[EventChange]:
    ctx = info.context
    key = ids.parse("prf", profile_id, param="profile_id")
    # Watching before the check: nothing that commits after the check is missed.
    watch = ctx.keep(ctx.feed.watch_profile(key))
    profile_rules.check_administrable(await ctx.loaders.profile.load(key), ctx.viewer)
    return _EventChanges(ctx, key, watch)


async def _rsvp_stats(info: Info, event_id: strawberry.ID) -> AsyncIterator[RsvpStats]:
    ctx = info.context
    key = ids.parse("evt", event_id, param="event_id")
    watch = ctx.keep(ctx.feed.watch_event(key))
    first = _visible(await _read_stats(ctx.db, ctx.viewer.user_id, key))
    return _StatsChanges(ctx, key, watch, first)


_EVENT_CHANGES = ("Changes to the events of a profile the caller administers, in commit "
                  "order, from every process of the service.")
_RSVP_STATS = ("An event's RSVP stats, as they are and then each time they change, for "
               "anyone who can see the event.")


@strawberry.type(name="SubscriptionRoot",
                 description="Live changes, over WebSocket (graphql-transport-ws) at /graphql.")
class Subscription:
    event_changes: AsyncIterator[EventChange] = strawberry.subscription(
        resolver=_event_changes, description=_EVENT_CHANGES)
    rsvp_stats: AsyncIterator[RsvpStats] = strawberry.subscription(
        resolver=_rsvp_stats, description=_RSVP_STATS)
    # The first names, camelCase: answered alike for the dashboards that use them.
    event_changes_camel: AsyncIterator[EventChange] = strawberry.subscription(
        resolver=_event_changes, name="eventChanges", description=_EVENT_CHANGES,
        deprecation_reason="Use event_changes")
    rsvp_stats_camel: AsyncIterator[RsvpStats] = strawberry.subscription(
        resolver=_rsvp_stats, name="rsvpStats", description=_RSVP_STATS,
        deprecation_reason="Use rsvp_stats")


class _EventChanges:
    def __init__(self, ctx: LiveContext, profile_id: str, watch: Watch) -> None:
        self._ctx = ctx
        self._profile_id = profile_id
        self._watch = watch

    def __aiter__(self) -> _EventChanges:
        return self

    async def __anext__(self) -> EventChange:
        while True:
            change = await self._watch.next()
            self._ctx.refresh()
            row = await self._event(change)
            if row is not None and profile_rules.administers(row, self._ctx.viewer):
                # One payload for all of this caller's subscriptions to the change, so
                # that its result is executed once for them all (graph/fanout.py).
                made = EventChange(type=change.type, event=Event.from_row(row),
                                   occurrence=await self._occurrence(change, row))
                return await change.read_once(("event_change", self._ctx.viewer.user_id),
                                              functools.partial(_payload, made))
            # No longer theirs to see: the profile's read says why. Still theirs, the
            # event gone past remembering: nothing to show.
            profile = await self._ctx.loaders.profile.load(self._profile_id)
            profile_rules.check_administrable(profile, self._ctx.viewer)

    async def _event(self, change: Change) -> asyncpg.Record | None:
        db, viewer_id = self._ctx.db, self._ctx.viewer.user_id

        async def read() -> asyncpg.Record | None:
            # What the event loader reads for this caller.
            if change.type != "event.deleted":
                rows = await event_store.by_ids(db, [change.event_id], viewer_id)
                if rows:
                    return rows[0]
            # Deleted (perhaps since this change): as it was.
            return await change_store.deleted_event(db, change.event_id, viewer_id)

        return await change.read_once(("event", viewer_id), read)

    async def _occurrence(self, change: Change, row: asyncpg.Record) -> Occurrence | None:
        if change.occurrence_id is None:
            return None
        try:
            return await change.read_once(
                ("occurrence", self._ctx.viewer.user_id),
                functools.partial(occurrences.read, self._ctx, row, change.occurrence_id))
        except ApiError:  # split or pruned away since, or past what may be expanded
            return None

    async def aclose(self) -> None:
        self._watch.close()


class _StatsChanges:
    def __init__(self, ctx: LiveContext, event_id: str, watch: Watch, first: RsvpStats) -> None:
        self._ctx = ctx
        self._event_id = event_id
        self._watch = watch
        self._last = first
        self._first: RsvpStats | None = first

    def __aiter__(self) -> _StatsChanges:
        return self

    async def __anext__(self) -> RsvpStats:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        viewer_id = self._ctx.viewer.user_id
        while True:
            change = await self._watch.next()
            stats = _visible(await change.read_once(("rsvp_stats", viewer_id), lambda: (
                _read_stats(self._ctx.db, viewer_id, self._event_id))))
            if stats != self._last:
                self._last = stats
                return stats

    async def aclose(self) -> None:
        self._watch.close()


async def _payload(change: EventChange) -> EventChange:
    return change


async def _read_stats(db: Database, viewer_id: str, event_id: str) -> RsvpStats | None:
    """What the event and stats loaders read: the stats, if the caller can see the event."""
    visible, counts = await asyncio.gather(event_store.by_ids(db, [event_id], viewer_id),
                                           rsvp_store.stats(db, [event_id]))
    return RsvpStats.from_row(event_id, counts[0] if counts else None) if visible else None


def _visible(stats: RsvpStats | None) -> RsvpStats:
    if stats is None:  # as event_rsvp_stats answers
        raise not_found("event", param="event_id")
    return stats
