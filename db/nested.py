"""Lists under many parents at once: the GraphQL connections (`Profile.events`,
`Organization.profiles`, ...) of a whole level of a document in one statement,
whatever the number of parents and their page sizes.

A `Listing` is given as `inner`: `SELECT <columns> FROM ... WHERE <scope>`, where
the scope names the parent as `k.parent` and the list's own parameters start at
$5. `pages` runs it once per parent through a LATERAL join, keyset-paged on
(`order`, `id`) after each parent's own cursor; `counts` counts each parent's list
up to a cap, with the same `inner`, so a count can never disagree with the pages
it counts. The REST read of one parent's list is the same statement with one
parent (`page`), so a list's rule is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from db.database import Database

Parent = tuple[str, datetime | None, str | None]
"""A parent's id and its page's keyset position ((order, id) of the row before)."""

_PARENTS = """unnest($1::text[], $2::timestamptz[], $3::text[])
    WITH ORDINALITY AS k(parent, after_ts, after_id, n)"""


@dataclass(frozen=True)
class Listing:
    """One kind of list under a parent: `inner` and its order column (`e.start_time`),
    the keyset being (order, id) of the list's own table alias."""

    inner: str
    order: str

    @property
    def column(self) -> str:
        """The order column's name in the rows (`start_time`): what a cursor keeps."""
        return self.order.split(".", 1)[1]

    async def pages(self, db: Database, parents: Sequence[Parent], limit: int, *args: Any
                    ) -> list[list[asyncpg.Record]]:
        """Up to `limit` rows of each parent's list after its keyset, in order; one
        list per parent, in the parents' order (a parent may come twice, with two
        cursors). `args` are the list's own parameters, $5 on."""
        item = self.order.split(".", 1)[0]
        rows = await db.fetch(
            f"""
            SELECT k.n AS parent_n, x.* FROM {_PARENTS}
            CROSS JOIN LATERAL (
                {self.inner}
                  AND ({self.order}, {item}.id) > (coalesce(k.after_ts, '-infinity'),
                                                   coalesce(k.after_id, ''))
                ORDER BY {self.order}, {item}.id
                LIMIT $4
            ) x
            """,
            [p[0] for p in parents], [p[1] for p in parents], [p[2] for p in parents], limit,
            *args,
        )
        grouped: list[list[asyncpg.Record]] = [[] for _ in parents]
        for row in rows:
            grouped[row["parent_n"] - 1].append(row)
        return grouped

    async def page(self, db: Database, parent: str, after: tuple[datetime, str] | None,
                   limit: int, *args: Any) -> list[asyncpg.Record]:
        """One parent's rows after `after`: the REST read of the same list."""
        return (await self.pages(db, [(parent, *(after or (None, None)))], limit, *args))[0]

    async def counts(self, db: Database, parents: Sequence[str], cap: int, *args: Any
                     ) -> list[int]:
        """How many rows each parent's list has, counting no further than `cap`."""
        rows = await db.fetch(
            f"""
            SELECT k.n AS parent_n, (SELECT count(*) FROM ({self.inner} LIMIT $4) c) AS total
            FROM {_PARENTS}
            """,
            list(parents), [None] * len(parents), [None] * len(parents), cap, *args,
        )
        totals = [0] * len(parents)
        for row in rows:
            totals[row["parent_n"] - 1] = int(row["total"])
        return totals
