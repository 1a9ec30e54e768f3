"""Full-text search over events, profiles and series: one statement per page.

The tsvector columns and their GIN indexes are in migration 0005. The user's
text reaches SQL only as a bound parameter: `websearch_to_tsquery` parses it
(quotes, `or`, `-` as a search box does; it never fails on odd input), once
with each configuration the columns are indexed with, and the two are ORed.
For a prefix match of the last word, `:*` is appended to the final operand of
the parsed query's canonical text form, whose every lexeme is quoted, so the
edit cannot change how anything else parses.

Visibility is decided in the statement, by the same SQL as every other read
(db/visibility.py): events and series by their profile's rule, profiles by
`profile_visible`. Rows are ranked by `ts_rank`, rounded to six significant
digits (float4 to numeric), and that rounded value is the rank clients see and
the cursor's keyset carries.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from db import visibility
from db.database import Database

KINDS = ("event", "profile", "series")

# Parameters: $1 the text, $2 whether its last word is a prefix, $3 the viewer,
# $4 and $5 the keyset (rank, id) the page starts after, $6 the row count.


def _parsed(config: str) -> str:
    """$1 as a tsquery; with $2, its final operand `'word'` becomes `'word':*`."""
    return (f"regexp_replace(websearch_to_tsquery('{config}', $1::text)::text, '''$', "
            "CASE WHEN $2::boolean THEN ''':*' ELSE '''' END)::tsquery")


# The query as a scalar subquery of the materialized CTE: an InitPlan, computed
# once per statement, and a plain `column @@ value` restriction that the GIN
# index serves (a join to the CTE leaves that to join order and cost guesses).
_QUERY = "(SELECT query FROM q)"


def _rank(tsv: str) -> str:
    """ts_rank with its default weights spelled out (D, C, B, A); migration 0005
    weights titles, names and handles A, descriptions B, locations C."""
    return f"ts_rank('{{0.1, 0.2, 0.4, 1.0}}', {tsv}, {_QUERY})::numeric::float8"


_BRANCHES = {
    "event": f"""
        SELECT 'event' AS kind, e.id, e.title, e.description, e.image_url,
               e.slug::text AS slug, e.start_time AS date_info,
               p.platform_id::text AS handle, {_rank('e.search_tsv')} AS rank,
               {visibility.columns('$3')}
        FROM events e {visibility.join_profile('e', '$3')}
        WHERE e.search_tsv @@ {_QUERY} AND {visibility.visible('e', '$3')}
    """,
    "series": f"""
        SELECT 'series' AS kind, s.id, s.name AS title, s.description,
               NULL::text AS image_url, s.slug::text AS slug, NULL::timestamptz AS date_info,
               p.platform_id::text AS handle, {_rank('s.search_tsv')} AS rank,
               {visibility.columns('$3')}
        FROM series s {visibility.join_profile('s', '$3')}
        WHERE s.search_tsv @@ {_QUERY} AND {visibility.visible('s', '$3')}
    """,
    # A profile is found by those who may retrieve it: `profile_visible`.
    "profile": f"""
        SELECT * FROM (
            SELECT 'profile' AS kind, p.id, p.display_name AS title, p.description,
                   p.profile_image_url AS image_url, p.platform_id::text AS slug,
                   NULL::timestamptz AS date_info, p.platform_id::text AS handle,
                   {_rank('p.search_tsv')} AS rank, {visibility.columns('$3')}
            FROM profiles p
            LEFT JOIN organization_members m
              ON m.organization_id = p.organization_id AND m.user_id = $3
            WHERE p.search_tsv @@ {_QUERY}
        ) found
        WHERE profile_visible
    """,
}


def sql(kinds: Sequence[str]) -> str:
    """The statement for a page of hits of these kinds (a non-empty subset of
    KINDS), ordered by rank descending, then id."""
    branches = "\n    UNION ALL\n".join(_BRANCHES[k] for k in KINDS if k in kinds)
    return f"""
    WITH q AS MATERIALIZED (
        SELECT {_parsed('english')} || {_parsed('simple')} AS query
    )
    SELECT kind, id, title, description, image_url, slug, date_info, rank,
           CASE WHEN profile_visible THEN handle END AS profile_handle
    FROM ({branches}) hits
    WHERE $4::float8 IS NULL OR rank < $4 OR (rank = $4 AND id > $5::text)
    ORDER BY rank DESC, id
    LIMIT $6
    """


def arguments(
    text: str, prefix: bool, viewer_id: str, after: tuple[float, str] | None, limit: int
) -> tuple[object, ...]:
    """The parameters of `sql`, in order."""
    after_rank, after_id = after if after else (None, None)
    return text, prefix, viewer_id, after_rank, after_id, limit


async def page(
    db: Database, kinds: Sequence[str], text: str, prefix: bool, viewer_id: str,
    after: tuple[float, str] | None, limit: int,
) -> list[asyncpg.Record]:
    return await db.fetch(sql(kinds), *arguments(text, prefix, viewer_id, after, limit))
