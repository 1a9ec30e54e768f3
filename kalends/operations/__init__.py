"""Every public operation, declared once. Importing this package registers them."""

from kalends.operations import (  # noqa: I001
    agenda, calendars, context, events, occurrences, external_calendars, follows, freebusy,
    organizations, profiles, rsvps, search, series, subscriptions, webhooks,
)

__all__ = ["agenda", "calendars", "context", "events", "external_calendars",
           "follows", "freebusy", "occurrences", "organizations", "profiles", "rsvps",
           "search", "series", "subscriptions", "webhooks"]
