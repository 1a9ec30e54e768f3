"""Webhooks (docs/api-choices.md, "Webhooks"): endpoints, their secrets, and the outbox.

A profile's administrators register endpoints. A change to one of the profile's
events or RSVPs is recorded by `record`, in the transaction of the change: one
message holding the exact body to send (the resource as REST shows it to the
profile's owner) and one queued delivery per active endpoint that wants its
type, plus a job per endpoint. Delivery is `domain.notify.webhook_delivery`'s.

That body is read by a `Render` the write's caller gives for its duration
(`rendered_by`: registry/calls.py runs every write so), not passed down the write's
signatures. It is read as the message is recorded, before the write goes on,
because a deleted resource is shown as it was (docs/api-choices.md, "Webhooks").

Messages follow Standard Webhooks: `webhook-id` (the message ID, the same on
every retry, for receivers to drop duplicates), `webhook-timestamp`, and
`webhook-signature`, `v1,` + base64 HMAC-SHA256 of `id.timestamp.body` keyed
with the base64 part of a `whsec_` secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import asyncpg
import orjson
from pydantic import Field

from core.errors import ApiError
from db import webhooks as store
from db.database import Database, Tx
from domain import ids, jobs, outbound
from domain.connected.vault import Vault
from domain.notify import changes
from domain.outbound import OutboundError
from domain.times import utc_text
from domain.validation import Body, Url

EventType = Literal[
    "event.created", "event.updated", "event.cancelled", "event.rescheduled", "event.deleted",
    "rsvp.created", "rsvp.updated", "rsvp.deleted",
    "occurrence.updated", "occurrence.cancelled", "occurrence.restored",
]
EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)
ENTRYPOINT = "webhook_delivery"
SECRET_PREFIX = "whsec_"
ROTATION_OVERLAP = timedelta(hours=24)

Kind = Literal["event", "rsvp", "occurrence"]
Render = Callable[[Tx, str, Kind, dict[str, str]], Awaitable[dict[str, Any]]]
"""(transaction, owner's user ID, kind, the read's variables) -> the resource as
REST shows it to that user, read inside the transaction."""

_RENDER: ContextVar[Render | None] = ContextVar("kalends_webhook_render", default=None)


@contextmanager
def rendered_by(render: Render) -> Iterator[None]:
    """The writes made inside (the tasks started inside, too) record their messages
    with `render`."""
    token = _RENDER.set(render)
    try:
        yield
    finally:
        _RENDER.reset(token)

EventTypes = Annotated[
    list[EventType],
    Field(min_length=1, max_length=len(EVENT_TYPES),
          description="The event types to receive; each at most once.",
          json_schema_extra={"uniqueItems": True}),  # _check_types refuses repeats
]


class WebhookEndpointUpdate(Body):
    url: Url = Field(default=None)  # type: ignore[assignment]
    event_types: EventTypes = Field(default=None)  # type: ignore[arg-type]
    is_active: bool = Field(
        default=None,  # type: ignore[assignment]
        description=("false stops delivery: changes meanwhile are not sent, queued messages "
                     "wait; true resumes, oldest queued message first."))


class WebhookEndpointCreate(WebhookEndpointUpdate):
    """A new endpoint; it receives every event type unless `event_types` narrows them."""

    url: Url
    event_types: EventTypes = Field(default_factory=lambda: list(EVENT_TYPES))
    is_active: bool = True


# ---------------------------------------------------------------------------
# Rules


def check_url(url: str, *, allow_http: bool) -> None:
    """What delivery will accept (domain/outbound.py): https, or http to a
    loopback host when the operator allows it. An IP address, in whatever
    spelling a URL parser or a resolver reads as one, must be public and written
    as usual; `localhost` and names under it are loopback by definition, with
    any number of trailing dots. Every name is checked again, resolved, at each
    delivery. No userinfo (`https://user:pw@host/`): credentials belong in the
    signature, and the stored URL is shown back in full."""
    if _has_userinfo(url):
        raise _bad_url(url, "must not carry credentials (user:password@): receivers "
                       "check the webhook-signature header instead")
    try:
        target = outbound.check_url(url, allow_http=allow_http)
    except OutboundError:
        raise _bad_url(url, "must be an https URL" + (
            " (http only to a loopback host)" if allow_http else "")) from None
    if outbound.is_refused_host(target.raw_host or "", allow_loopback=allow_http):
        raise _bad_url(url, "must not point to a private, loopback or link-local address")


def _has_userinfo(url: str) -> bool:
    """Whether the URL's authority has a userinfo part, even an empty one (`@host`)."""
    try:
        authority = urlsplit(url.strip()).netloc
    except ValueError:
        return False  # not a URL at all: outbound.check_url says so
    return "@" in authority


def _bad_url(url: str, why: str) -> ApiError:
    return ApiError("invalid_field", f"`url` {why}.", param="url", details={"value": url})


def _check_types(types: Sequence[str]) -> None:
    seen = set()
    for t in types:
        if t in seen:
            raise ApiError("invalid_field", f"`event_types` lists `{t}` twice.",
                           param="event_types", details={"value": types})
        seen.add(t)


# ---------------------------------------------------------------------------
# Secrets and signatures


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(secret: str, message_id: str, timestamp: int, body: str) -> str:
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    mac = hmac.new(key, f"{message_id}.{timestamp}.{body}".encode(), hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


# ---------------------------------------------------------------------------
# Endpoint writes


async def create(db: Database, vault: Vault, profile: asyncpg.Record,
                 data: WebhookEndpointCreate, *, allow_http: bool) -> tuple[str, str]:
    """Returns the endpoint's ID and its secret, which is shown this once."""
    check_url(data.url, allow_http=allow_http)
    _check_types(data.event_types)
    endpoint_id = ids.new_id("whe")
    secret = new_secret()
    await store.insert(db, endpoint_id, profile["id"], data.model_dump(), vault.seal(secret))
    return endpoint_id, secret


async def update(db: Database, row: asyncpg.Record, data: WebhookEndpointUpdate, *,
                 allow_http: bool) -> None:
    changes = data.model_dump(exclude_unset=True)
    if "url" in changes:
        check_url(changes["url"], allow_http=allow_http)
    if "event_types" in changes:
        _check_types(changes["event_types"])
    resume = bool(changes.get("is_active")) and not row["is_active"]
    async with db.transaction() as tx:
        await store.update(tx, row["id"], changes, resume=resume)
        if resume:
            await jobs.enqueue(tx, ENTRYPOINT, {"endpoint_id": row["id"]})


async def delete(db: Database, row: asyncpg.Record) -> None:
    await store.delete(db, row["id"])


async def rotate(db: Database, vault: Vault, row: asyncpg.Record) -> str:
    """A new secret; the one it replaces still signs for `ROTATION_OVERLAP`."""
    secret = new_secret()
    await store.rotate(db, row["id"], vault.seal(secret), ROTATION_OVERLAP)
    return secret


# ---------------------------------------------------------------------------
# The outbox


async def record(tx: Tx, event_type: EventType, profile_id: str, kind: Kind,
                 *resources: dict[str, str]) -> None:
    """In the transaction of a change: queue a message per resource (given as
    the variables of its read) for each endpoint that wants it. Nothing is read
    or rendered for a profile without one. Live subscribers are told in any case
    (`domain.notify.changes`: the type and IDs only)."""
    render = _RENDER.get()
    if render is None:  # on every write, so a path that forgot fails without endpoints too
        raise RuntimeError("a write recorded a webhook message outside `rendered_by`")
    await changes.announce(tx, event_type, profile_id,
                           [(r["event_id"], r.get("occurrence_id")) for r in resources])
    endpoints = await store.subscribed(tx, profile_id, event_type)
    if not endpoints or not resources:
        return
    endpoint_ids = [e["id"] for e in endpoints]
    for variables in resources:
        data = await render(tx, endpoints[0]["owner_user_id"], kind, variables)
        body = orjson.dumps({
            "type": event_type, "timestamp": utc_text(datetime.now(UTC)), "data": data,
        }).decode()
        # Ordered per event: an RSVP's or an occurrence's messages go in its event's lane.
        await store.add_message(tx, ids.new_id("msg"), profile_id, event_type, body,
                                variables["event_id"], endpoint_ids)
    await jobs.enqueue_many(tx, ENTRYPOINT, [{"endpoint_id": e} for e in endpoint_ids])
