"""Keyset cursors (domain/pagination.py): one text per cursor, so that any edit is refused."""

from __future__ import annotations

import string
from datetime import UTC, datetime

import pytest

from core.errors import ApiError
from domain.pagination import Cursors

_ALPHABET = string.ascii_letters + string.digits + "-_"
_CURSORS = Cursors(b"k" * 32)
_WHEN = datetime(2031, 5, 6, 10, 0, tzinfo=UTC)


def _refused(text: str) -> bool:
    try:
        _CURSORS.decode("events:usr_1", text)
    except ApiError as error:
        assert (error.code, error.param) == ("invalid_cursor", "cursor")
        return True
    return False


@pytest.mark.parametrize("item_id", ["evt_1", "evt_12", "evt_123"])  # every length mod 4
def test_every_other_last_character_is_refused(item_id: str) -> None:
    """base64 leaves up to four bits of the last character unread: the texts that differ
    from the issued one only there decoded to the same cursor, and were taken for it."""
    cursor = _CURSORS.encode("events:usr_1", _WHEN, item_id)
    assert _CURSORS.decode("events:usr_1", cursor) == (_WHEN, item_id)
    others = [cursor[:-1] + c for c in _ALPHABET if c != cursor[-1]]
    assert [o for o in others if not _refused(o)] == []


def test_characters_outside_the_alphabet_are_refused() -> None:
    cursor = _CURSORS.encode("events:usr_1", _WHEN, "evt_1")
    for edited in (cursor[:4] + "!" + cursor[4:], cursor + "=", " " + cursor, cursor + "\n"):
        assert _refused(edited), edited
