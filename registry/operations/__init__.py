"""Every public operation, declared once. Importing this package registers them."""

from registry.operations import (
           agenda,
           calendars,
           context,
           events,
           external_calendars,
           follows,
           freebusy,
           occurrences,
           organizations,
           profiles,
           rsvps,
           search,
           series,
           subscriptions,
           webhooks,
)

__all__ = ["agenda", "calendars", "context", "events", "external_calendars",
           "follows", "freebusy", "occurrences", "organizations", "profiles", "rsvps",
           "search", "series", "subscriptions", "webhooks"]
