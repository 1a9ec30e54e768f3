"""Every job a worker runs, in `kalends serve` and in `kalends worker` alike."""

from __future__ import annotations

from collections.abc import Mapping

from kalends import attendee_mail, config, jobs, sync, webhook_delivery
from kalends.connected.engine import open_vault


def all_handlers(settings: config.Settings, connected: Mapping[str, jobs.Handler]
                 ) -> dict[str, jobs.Handler]:
    """Subscription sync, connected calendars (`connected`, opened by the caller),
    attendee e-mail, webhooks."""
    return {**sync.HANDLERS, **connected,
            **attendee_mail.handlers(settings.smtp_url, settings.mail_from),
            **webhook_delivery.handlers(settings, open_vault(settings))}
