"""INSERT and UPDATE of the columns a request set, built in one place.

Table and column names come from the calling module's constants (its
`WRITABLE`), never from a request: only values are parameters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from db.database import Database, Tx


async def insert(db: Database | Tx, table: str, writable: Iterable[str],
                 fixed: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    """Insert `fixed` and those of `values` that are `writable`."""
    row = {**fixed, **{c: values[c] for c in writable if c in values}}
    placeholders = ", ".join(f"${i}" for i in range(1, len(row) + 1))
    await db.execute(
        f"INSERT INTO {table} ({', '.join(row)}) VALUES ({placeholders})", *row.values()
    )


async def update(db: Database | Tx, table: str, writable: Iterable[str], key: str,
                 values: Mapping[str, Any], *, condition: str = "") -> None:
    """Set those of `values` that are `writable` on row `key` (and `updated_at`), where
    `condition` (SQL, may be empty) also holds; nothing to set writes nothing."""
    cols = [c for c in writable if c in values]
    if not cols:
        return
    assignments = ", ".join(f"{c} = ${i}" for i, c in enumerate(cols, start=2))
    where = f" AND {condition}" if condition else ""
    await db.execute(
        f"UPDATE {table} SET {assignments}, updated_at = now() WHERE id = $1{where}",
        key, *(values[c] for c in cols),
    )
