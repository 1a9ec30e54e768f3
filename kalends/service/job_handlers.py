"""Every job a worker runs, in `kalends serve` and in `kalends worker` alike."""

from __future__ import annotations

from collections.abc import Mapping

from kalends import sync
from kalends.connected.engine import open_vault
from kalends.notify import attendee_mail, webhook_delivery
from kalends.service import config, jobs


def all_handlers(settings: config.Settings, connected: Mapping[str, jobs.Handler]
                 ) -> dict[str, jobs.Handler]:
    """Subscription sync, connected calendars (`connected`, opened by the caller),
    attendee e-mail, webhooks."""
    return {**sync.HANDLERS, **connected,
            **attendee_mail.handlers(settings.smtp_url, settings.mail_from),
            **webhook_delivery.handlers(settings, open_vault(settings))}
