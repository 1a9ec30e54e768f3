"""Keyset cursors: opaque, tamper-evident, and bound to the list they came from.

A cursor is the base64url of `key | id | MAC`. The key is the list's order
column: a timestamp (created_at, or start_time for event lists) as integer
microseconds, or a search rank as `r` and the float's repr, which reads back
to the same float exactly. The MAC covers the list key, so a cursor replayed on
another list (or by another caller) fails like an edited one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from core.errors import ApiError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAC_BYTES = 16
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
COUNT_CAP = 10_000
"""A list's `total_count` is exact up to this many items."""


class Cursors:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def encode(self, list_key: str, key: datetime | float, item_id: str) -> str:
        if isinstance(key, datetime):
            key_text = str((key - _EPOCH) // timedelta(microseconds=1))
        else:
            key_text = f"r{float(key)!r}"
        payload = f"{key_text}|{item_id}".encode()
        mac = self._mac(list_key, payload)
        return _text(payload + b"|" + mac)

    def decode(self, list_key: str, cursor: str) -> tuple[datetime, str]:
        """A timestamp-keyed cursor."""
        key, item_id = self._decode(list_key, cursor)
        if not isinstance(key, datetime):
            raise _invalid()
        return key, item_id

    def decode_rank(self, list_key: str, cursor: str) -> tuple[float, str]:
        """A rank-keyed cursor (search)."""
        key, item_id = self._decode(list_key, cursor)
        if isinstance(key, datetime):
            raise _invalid()
        return key, item_id

    def _decode(self, list_key: str, cursor: str) -> tuple[datetime | float, str]:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            # base64 leaves the last character's low bits unread, and skips what is
            # not in its alphabet: other texts than the one issued would decode to it.
            # One cursor, one text: an edited cursor is refused whatever the edit.
            if _text(raw) != cursor:
                raise ValueError
            payload, mac = raw[: -_MAC_BYTES - 1], raw[-_MAC_BYTES:]
            if raw[-_MAC_BYTES - 1 : -_MAC_BYTES] != b"|":
                raise ValueError
            if not hmac.compare_digest(mac, self._mac(list_key, payload)):
                raise ValueError
            key_text, item_id = payload.decode().split("|", 1)
            if key_text.startswith("r"):
                rank = float(key_text[1:])
                if not math.isfinite(rank):
                    raise ValueError
                return rank, item_id
            return _EPOCH + timedelta(microseconds=int(key_text)), item_id
        except (ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise _invalid() from exc

    def page(
        self, list_key: str, rows: list[Any], limit: int, *, order: str = "created_at"
    ) -> tuple[list[Any], bool, str | None]:
        """Cut a `limit + 1` fetch into a page; the cursor points after its last row,
        whose `order` column (a timestamp, or a float rank) and id are the keyset."""
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


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _invalid() -> ApiError:
    return ApiError("invalid_cursor", "The cursor is not one this list issued.", param="cursor")


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(
            "invalid_query_parameter", f"`limit` must be between 1 and {MAX_LIMIT}.",
            param="limit", details={"value": str(limit)},
        )
    return limit
