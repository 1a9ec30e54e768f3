"""Notifications: webhooks (the outbox and delivery), attendee e-mail, ICS feeds,
and the one iCalendar writer they and connected pushes share."""
