"""Every public operation, declared once. Importing this package registers them."""

from kalends.operations import events, organizations, profiles, rsvps, series

__all__ = ["events", "organizations", "profiles", "rsvps", "series"]
