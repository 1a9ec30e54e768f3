"""Every job a worker runs, in `kalends serve` and in `kalends worker` alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from db.database import Database
from domain import config, jobs, sync
from domain.connected.engine import connected_jobs, open_vault
from domain.notify import attendee_mail, webhook_delivery


def all_handlers(settings: config.Settings, connected: Mapping[str, jobs.Handler],
                 webhook_db: Database | None = None) -> dict[str, jobs.Handler]:
    """Subscription sync, connected calendars (`connected`, opened by the caller),
    attendee e-mail, webhooks (on `webhook_db`, delivery's own pool, if given)."""
    return {**sync.handlers(), **connected,
            **attendee_mail.handlers(settings.smtp_url, settings.mail_from),
            **webhook_delivery.handlers(settings, open_vault(settings), webhook_db)}


@asynccontextmanager
async def opened(dsn: str, settings: config.Settings, db: Database
                 ) -> AsyncIterator[dict[str, jobs.Handler]]:
    """Every handler, for a worker whose jobs use `db`, with what they hold open
    until the worker has stopped: connected calendars', and webhook delivery's
    own pool (`webhook_delivery.POOL_SIZE` connections), so that no other job can
    hold delivery up by holding the jobs' connections."""
    delivery = await Database.connect(dsn, min_size=1, max_size=webhook_delivery.POOL_SIZE)
    try:
        async with connected_jobs(db, settings) as connected:
            yield all_handlers(settings, connected, delivery)
    finally:
        await delivery.close()
