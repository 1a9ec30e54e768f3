"""What the agenda says about a connected calendar's sync state (docs/api-choices.md, "Connected
calendars"): at most one warning per calendar, the most pressing first."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

_STALE_INTERVALS = 3

_MESSAGES = {
    "sync_disabled": "The provider refused this account's credentials; its calendars are not "
                     "synced until the account is connected again.",
    "sync_failed": "The last sync of this calendar's account failed; it is retried, and the "
                   "events shown are those of the last successful sync.",
    "sync_unknown": "This calendar has not been synced yet; its events are not included.",
    "sync_unverified": "This calendar's first sync has not completed yet; its events may be "
                       "incomplete.",
    "sync_stale": "This calendar's last successful sync is older than three sync intervals; "
                  "its events may be out of date.",
}


def warning(row: Mapping[str, Any], interval: timedelta, now: datetime
            ) -> tuple[str, str] | None:
    """(code, message) for a calendar row carrying its account's `account_status`
    and `last_attempt_at` and its own `last_success_at`; None when all is well."""
    code: str | None = None
    if row["account_status"] == "disabled":
        code = "sync_disabled"
    elif row["account_status"] == "failed":
        code = "sync_failed"
    elif row["last_success_at"] is None:
        code = "sync_unknown" if row["last_attempt_at"] is None else "sync_unverified"
    elif now - row["last_success_at"] > _STALE_INTERVALS * interval:
        code = "sync_stale"
    return None if code is None else (code, _MESSAGES[code])
