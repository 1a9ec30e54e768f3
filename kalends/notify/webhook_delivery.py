"""Webhook delivery: a job per endpoint sends its queue, oldest first.

At least once. A delivery is marked done only after a 2xx; a worker that dies
mid-send leaves it pending, and it is sent again (same `webhook-id`, which
receivers use to drop the copy).

In order per endpoint. One run at a time holds an endpoint's lease (columns
naming the run and its end, not a lock held across the network call) and sends
from the head of its queue; while the head waits for a retry, what came after it
waits too. A run that finds the lease taken leaves the queue to the holder, which
looks once more as it lets go; if the holder died, a job is queued for when its
lease ends. A run that outlived its lease finds out at its next write and stops.

Failures follow the retry schedule (Standard Webhooks' by default), waiting
longer when the receiver's `Retry-After` asks. `410 Gone` disables the endpoint
at once; so does a message whose last attempt fails. A disabled endpoint keeps
its queue, and enabling it again starts the schedule afresh, so nothing queued is
dropped. Every attempt has a timeout, follows no redirect, and connects only to
public addresses (kalends/outbound.py), http to loopback only when allowed.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import asyncpg

from db import webhooks as store
from db.database import Database
from kalends.connected.vault import Vault, VaultError
from kalends.notify.webhooks import ENTRYPOINT, sign
from kalends.outbound import OutboundError, check_url, guarded_session
from kalends.service import config, jobs

log = logging.getLogger("kalends.webhooks")

_MAX_RETRY_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class _Outcome:
    ok: bool = False
    gone: bool = False
    error: str = ""
    retry_after: timedelta | None = None


def handlers(settings: config.Settings, vault: Vault) -> dict[str, jobs.Handler]:
    sender = _Sender(settings, vault)
    return {ENTRYPOINT: sender.run}


class _Sender:
    def __init__(self, settings: config.Settings, vault: Vault) -> None:
        self._schedule = settings.webhook_retry_schedule
        self._timeout = settings.webhook_timeout
        self._allow_http = settings.webhook_allow_http
        self._vault = vault
        # Longer than any attempt (its timeout) and the statements around it.
        self._lease = 2 * settings.webhook_timeout + timedelta(seconds=5)

    async def run(self, db: Database, payload: dict[str, Any]) -> None:
        endpoint_id = payload["endpoint_id"]
        token = uuid.uuid4().hex
        endpoint = await store.claim(db, endpoint_id, token, self._lease)
        if endpoint is None:
            left = await store.lease_left(db, endpoint_id)
            if left is not None:  # held: by a live run, which looks again, or a dead one
                await _wake(db, endpoint_id, left + timedelta(seconds=1))
            return
        session = guarded_session(allow_loopback=self._allow_http,
                                  timeout=self._timeout.total_seconds())
        async with session:
            while endpoint is not None:
                endpoint = await self._step(db, session, endpoint, token)

    async def _step(self, db: Database, session: aiohttp.ClientSession,
                    endpoint: asyncpg.Record, token: str) -> asyncpg.Record | None:
        """Send the head of the queue; the endpoint for the next step, or None."""
        endpoint_id = endpoint["id"]
        head = await store.head(db, endpoint_id)
        if head is None or head["wait"] > timedelta(0):
            if head is not None:
                await _wake(db, endpoint_id, head["wait"])
            if await store.release(db, endpoint_id, token):
                return await store.claim(db, endpoint_id, token, self._lease)
            return None
        outcome = await self._attempt(session, endpoint, head)
        seq, message_id = head["seq"], head["message_id"]
        if outcome.ok:
            nxt = await store.attempted(db, endpoint_id, token, self._lease, seq, None, None)
        elif outcome.gone:
            await _disable(db, endpoint_id, seq, outcome.error,
                           "The endpoint answered 410 Gone.")
            return None
        else:
            attempts = head["attempts"] + 1
            log.info("webhook delivery failed", extra={
                "endpoint_id": endpoint_id, "message_id": message_id, "attempt": attempts,
                "error": outcome.error})
            if attempts >= len(self._schedule):
                await _disable(db, endpoint_id, seq, outcome.error, (
                    f"{attempts} attempts to deliver message {message_id} failed; "
                    f"the last: {outcome.error}."))
                return None
            wait = self._schedule[attempts]
            if outcome.retry_after is not None:
                wait = max(wait, min(outcome.retry_after, _MAX_RETRY_AFTER))
            nxt = await store.attempted(db, endpoint_id, token, self._lease, seq,
                                        outcome.error, wait)
        if nxt is None:  # disabled or deleted meanwhile, or the lease lost
            await store.release(db, endpoint_id, token)  # so enabling it resumes at once
        return nxt

    async def _attempt(self, session: aiohttp.ClientSession, endpoint: asyncpg.Record,
                       head: asyncpg.Record) -> _Outcome:
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


async def _disable(db: Database, endpoint_id: str, seq: int, error: str, reason: str
                   ) -> None:
    log.warning("webhook endpoint disabled", extra={"endpoint_id": endpoint_id,
                                                    "reason": reason})
    await store.disable(db, endpoint_id, seq, error, reason)
