"""Webhook delivery: each endpoint's queue is a lane per event, sent in order.

At least once. A delivery is marked done only after a 2xx; a worker that dies
mid-send leaves it pending, and it is sent again (same `webhook-id`, which
receivers use to drop the copy).

In order per resource (docs/api-choices.md, "Webhooks"). A message's lane is the event it is about
(an RSVP's is its event's), and a lane's messages go one at a time, oldest
first; lanes of one endpoint go side by side, so a message waiting for its retry
holds back only its own event's. A run leases lanes (columns naming the run and
the lease's end, on the lane's row, not a lock held across the network call),
at most `PER_ENDPOINT` of an endpoint's at once across every process, and sends
each lane's head until the lane empties or waits, then leases another due lane.
A run that outlived its lease finds out at its next write and lets the lane be;
a lane whose sender died comes due again when its lease ends, and a job is
queued for then, as for a retry. `PER_PROCESS` bounds what one process has in
flight across endpoints.

Failures follow the retry schedule (Standard Webhooks' by default), waiting
longer when the receiver's `Retry-After` asks. `410 Gone` disables the endpoint
at once; so does a message whose last attempt fails. A disabled endpoint keeps
its queue, and enabling it again starts the schedule afresh, so nothing queued is
dropped. Every attempt has a timeout, follows no redirect, and connects only to
public addresses (domain/outbound.py), http to loopback only when allowed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import asyncpg

from db import webhooks as store
from db.database import Database
from domain import config, jobs
from domain.connected.vault import Vault, VaultError
from domain.notify.webhooks import ENTRYPOINT, sign
from domain.outbound import OutboundError, check_url, guarded_session

log = logging.getLogger("kalends.webhooks")

PER_ENDPOINT = 4
"""Requests in flight to one endpoint, across every process: enough that a few
slow or failing events do not stall the rest, few enough not to flood a receiver."""
PER_PROCESS = 64
"""Requests in flight from one process, across every endpoint."""
POOL_SIZE = 8
"""Connections of delivery's own pool in each worker (kalends/service/job_handlers.py):
a sender holds one only for a statement, never across a request."""
_MAX_RETRY_AFTER = timedelta(days=1)
_UNKNOWN: Mapping[str, Any] = {"seq": None}
"""A lane's head not read yet (distinct from a lane found empty)."""
_WAKE_MARGIN = timedelta(milliseconds=50)
"""A wake comes this much after the lane is due, so it finds it due."""


@dataclass(frozen=True)
class _Outcome:
    ok: bool = False
    gone: bool = False
    error: str = ""
    retry_after: timedelta | None = None


def handlers(settings: config.Settings, vault: Vault, pool: Database | None = None
             ) -> dict[str, jobs.Handler]:
    """`pool`: connections of delivery's own (at least PER_ENDPOINT), so that other
    jobs waiting with theirs (a profile's sync jobs queue on its lock) do not hold
    delivery up; by default the jobs' pool."""
    sender = _Sender(settings, vault, pool)
    return {ENTRYPOINT: sender.run}


class _Sender:
    def __init__(self, settings: config.Settings, vault: Vault, pool: Database | None
                 ) -> None:
        self._pool = pool
        self._schedule = settings.webhook_retry_schedule
        self._timeout = settings.webhook_timeout
        self._allow_http = settings.webhook_allow_http
        self._vault = vault
        # Longer than any attempt (its timeout) and the statements around it.
        self._lease = 2 * settings.webhook_timeout + timedelta(seconds=5)
        self._slots = asyncio.Semaphore(PER_PROCESS)
        # This process's senders per endpoint, and the endpoints whose jobs left
        # their messages to them: an economy of jobs only; what is safe across
        # processes is decided by the database (db/webhooks.py).
        self._drives: Counter[str] = Counter()
        self._poked: set[str] = set()

    async def run(self, db: Database, payload: dict[str, Any]) -> None:
        """Send the endpoint's due lanes until none is left due, then have a job
        come back when the next one is (a retry, or a lease that may be a dead
        sender's). Runs in other processes go on beside it, within the bound."""
        endpoint_id = payload["endpoint_id"]
        db = self._pool or db
        if self._drives[endpoint_id] >= PER_ENDPOINT:
            # This process already sends as much to the endpoint as it may, and
            # those senders look for due lanes until there are none: one of them
            # looks once more before it stops (`_drive`). Nothing to claim here.
            self._poked.add(endpoint_id)
            return
        token = uuid.uuid4().hex
        session = guarded_session(allow_loopback=self._allow_http,
                                  timeout=self._timeout.total_seconds())
        async with session:
            await self._claim_and_drive(db, session, endpoint_id, token)
        left = await store.next_due(db, endpoint_id)
        if left is not None:
            await _wake(db, endpoint_id, left + _WAKE_MARGIN)

    async def _claim_and_drive(self, db: Database, session: aiohttp.ClientSession,
                               endpoint_id: str, token: str) -> None:
        room = PER_ENDPOINT - self._drives[endpoint_id]
        taken = await self._take_slots(room)
        try:
            endpoint, lanes = await store.claim(db, endpoint_id, token, self._lease,
                                                bound=PER_ENDPOINT, most=taken)
        except BaseException:
            self._give_slots(taken)
            raise
        self._give_slots(taken - len(lanes))
        if endpoint is not None:
            await asyncio.gather(*(self._drive(db, session, endpoint, lane, token)
                                   for lane in lanes))

    async def _take_slots(self, most: int) -> int:
        """One slot of the process's, waited for, and up to `most` - 1 more if free now."""
        await self._slots.acquire()
        taken = 1
        while taken < most and not self._slots.locked():
            await self._slots.acquire()  # free: returns at once
            taken += 1
        return taken

    def _give_slots(self, count: int) -> None:
        for _ in range(count):
            self._slots.release()

    async def _drive(self, db: Database, session: aiohttp.ClientSession,
                     endpoint: asyncpg.Record, resource_id: str, token: str) -> None:
        """One slot: send a lane, and then, in its place, each next due lane."""
        endpoint_id = endpoint["id"]
        self._drives[endpoint_id] += 1
        try:
            lane: asyncpg.Record | None = endpoint
            head: Mapping[str, Any] | None = _UNKNOWN
            while lane is not None:
                lane = await self._lane(db, session, lane, resource_id, token, head)
                if lane is not None:  # handed over by `finish`, with its head
                    resource_id, head = lane["resource_id"], lane
                    continue
                head = _UNKNOWN
                # None handed over (the lane waits for a retry, or nothing else
                # was due): lease one more within the bound, if any is due. A job
                # that left its message to this process's senders meanwhile
                # (`run`) is seen here: no await between this check and the end.
                while lane is None:
                    self._poked.discard(endpoint_id)
                    fresh, more = await store.claim(db, endpoint_id, token, self._lease,
                                                    bound=PER_ENDPOINT, most=1)
                    if fresh is not None and more:
                        lane, resource_id = fresh, more[0]
                    elif fresh is None or endpoint_id not in self._poked:
                        return
        finally:
            self._drives[endpoint_id] -= 1
            self._give_slots(1)

    async def _lane(self, db: Database, session: aiohttp.ClientSession,
                    endpoint: asyncpg.Record, resource_id: str, token: str,
                    head: Mapping[str, Any] | None) -> asyncpg.Record | None:
        """Send the lane's messages, oldest first, until it is empty, waits for a
        retry, or is no longer this run's; returns the lane leased in its place,
        with its head. `head`: the lane's, if known (`_UNKNOWN` if not)."""
        head = await store.head(db, endpoint["id"], resource_id) if head is _UNKNOWN else head
        while True:
            if head is None or head["seq"] is None:
                nxt = await store.finish(db, endpoint["id"], resource_id, token, self._lease)
                if nxt is None or nxt["resource_id"] != resource_id:
                    return nxt  # with its head
                endpoint = head = nxt
                continue
            sent = await self._step(db, session, endpoint, resource_id, token, head)
            if sent is None:  # waits for a retry, or no longer this run's
                return None
            endpoint = sent
            head = None if sent["next_seq"] is None else {
                "seq": sent["next_seq"], "message_id": sent["next_message_id"],
                "attempts": sent["next_attempts"], "body": sent["next_body"]}

    async def _step(self, db: Database, session: aiohttp.ClientSession,
                    endpoint: asyncpg.Record, resource_id: str, token: str,
                    head: Mapping[str, Any]) -> asyncpg.Record | None:
        """Send the lane's head; the endpoint (with the lane's next message) to go
        on with the lane, or None."""
        endpoint_id = endpoint["id"]
        outcome = await self._attempt(session, endpoint, head)
        seq, message_id = head["seq"], head["message_id"]
        if outcome.ok:
            nxt = await store.attempted(db, endpoint_id, resource_id, token, self._lease, seq,
                                        None, None)
            if nxt is None:  # disabled or deleted meanwhile, or the lease lost
                # Let go at once, so enabling it resumes the lane without waiting.
                await store.release(db, endpoint_id, resource_id, token)
            return nxt
        if outcome.gone:
            await _disable(db, endpoint_id, resource_id, token, seq, outcome.error,
                           "The endpoint answered 410 Gone.")
            return None
        attempts = head["attempts"] + 1
        log.info("webhook delivery failed", extra={
            "endpoint_id": endpoint_id, "message_id": message_id, "attempt": attempts,
            "error": outcome.error})
        if attempts >= len(self._schedule):
            await _disable(db, endpoint_id, resource_id, token, seq, outcome.error, (
                f"{attempts} attempts to deliver message {message_id} failed; "
                f"the last: {outcome.error}."))
            return None
        wait = self._schedule[attempts]
        if outcome.retry_after is not None:
            wait = max(wait, min(outcome.retry_after, _MAX_RETRY_AFTER))
        # The lane waits for the retry; its sender goes on with other lanes.
        await store.attempted(db, endpoint_id, resource_id, token, self._lease, seq,
                              outcome.error, wait)
        return None

    async def _attempt(self, session: aiohttp.ClientSession, endpoint: asyncpg.Record,
                       head: Mapping[str, Any]) -> _Outcome:
        message_id, body = head["message_id"], head["body"]
        timestamp = int(time.time())
        keys = [endpoint["secret"]] + (
            [endpoint["previous_secret"]] if endpoint["previous_secret"] is not None else [])
        try:
            signature = " ".join(
                sign(self._vault.open(bytes(k)), message_id, timestamp, body) for k in keys)
        except VaultError:
            # Sealed under another key (KALENDS_SECRET_KEY or the key file differs on
            # this machine): nothing is sent unsigned; the endpoint shows why it stops.
            return _Outcome(error="its secret cannot be decrypted with this service's key")
        headers = {
            "Content-Type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature,
        }
        try:
            target = check_url(endpoint["url"], allow_http=self._allow_http)
            async with session.post(target, data=body.encode(), headers=headers,
                                    allow_redirects=False) as response:
                status = response.status
                retry_after = _retry_after(response.headers.get("Retry-After"))
        except OutboundError as exc:  # Refused included: not a public address
            return _Outcome(error=exc.reason)
        except TimeoutError:
            return _Outcome(error=f"no answer within {self._timeout.total_seconds():g} s")
        except aiohttp.ClientConnectorError as exc:
            return _Outcome(error=f"could not connect ({type(exc).__name__})")
        except (aiohttp.ClientError, ValueError) as exc:
            return _Outcome(error=f"request failed ({type(exc).__name__})")
        if 200 <= status < 300:
            return _Outcome(ok=True)
        if status == 410:
            return _Outcome(gone=True, error="HTTP 410")
        if 300 <= status < 400:
            return _Outcome(error=f"HTTP {status}: redirects are not followed")
        return _Outcome(error=f"HTTP {status}", retry_after=retry_after)


def _retry_after(value: str | None) -> timedelta | None:
    """Seconds, or an HTTP date (RFC 9110 §10.2.3); None if absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return timedelta(seconds=int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when - datetime.now(UTC), timedelta(0))


async def _wake(db: Database, endpoint_id: str, wait: timedelta) -> None:
    async with db.transaction() as tx:
        if await store.schedule_wake(tx, endpoint_id, wait):
            await jobs.enqueue(tx, ENTRYPOINT, {"endpoint_id": endpoint_id}, after=wait)


async def _disable(db: Database, endpoint_id: str, resource_id: str, token: str, seq: int,
                   error: str, reason: str) -> None:
    log.warning("webhook endpoint disabled", extra={"endpoint_id": endpoint_id,
                                                    "reason": reason})
    await store.disable(db, endpoint_id, resource_id, token, seq, error, reason)
