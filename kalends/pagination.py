"""Keyset cursors: opaque, tamper-evident, and bound to the list they came from.

A cursor is the base64url of `timestamp micros | id | MAC` (the list's order
column: created_at, or start_time for event lists). The MAC
covers the list key, so a cursor replayed on another list (or by another
caller) fails like an edited one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Any

from kalends.errors import ApiError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAC_BYTES = 16
DEFAULT_LIMIT = 20
MAX_LIMIT = 100


class Cursors:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def encode(self, list_key: str, created_at: datetime, item_id: str) -> str:
        micros = (created_at - _EPOCH) // timedelta(microseconds=1)
        payload = f"{micros}|{item_id}".encode()
        mac = self._mac(list_key, payload)
        return base64.urlsafe_b64encode(payload + b"|" + mac).decode().rstrip("=")

    def decode(self, list_key: str, cursor: str) -> tuple[datetime, str]:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            payload, mac = raw[: -_MAC_BYTES - 1], raw[-_MAC_BYTES:]
            if raw[-_MAC_BYTES - 1 : -_MAC_BYTES] != b"|":
                raise ValueError
            if not hmac.compare_digest(mac, self._mac(list_key, payload)):
                raise ValueError
            micros_text, item_id = payload.decode().split("|", 1)
            return _EPOCH + timedelta(microseconds=int(micros_text)), item_id
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(
                "invalid_cursor", "The cursor is not one this list issued.", param="cursor"
            ) from exc

    def page(
        self, list_key: str, rows: list[Any], limit: int, *, order: str = "created_at"
    ) -> tuple[list[Any], bool, str | None]:
        """Cut a `limit + 1` fetch into a page; the cursor points after its last row,
        whose `order` column (a timestamp) and id are the keyset."""
        has_more = len(rows) > limit
        rows = rows[:limit]
        cursor = None
        if has_more:
            last = rows[-1]
            cursor = self.encode(list_key, last[order], last["id"])
        return rows, has_more, cursor

    def _mac(self, list_key: str, payload: bytes) -> bytes:
        msg = list_key.encode() + b"\x00" + payload
        return hmac.new(self._secret, msg, hashlib.sha256).digest()[:_MAC_BYTES]


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(
            "invalid_query_parameter", f"`limit` must be between 1 and {MAX_LIMIT}.",
            param="limit", details={"value": str(limit)},
        )
    return limit
