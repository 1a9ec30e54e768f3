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

# $1 the text, $2 whether its last word is a prefix, $3 the viewer, $4/$5 the
# keyset (rank, id) after which the page starts, $6 the row count.
_PARSED = """
    regexp_replace(websearch_to_tsquery('{config}', $1::text)::text,
                   '''$', CASE WHEN $2::boolean THEN ''':*' ELSE '''' END)::tsquery
"""

# Default ts_rank weights, spelled out: D, C, B, A (migration 0005 sets A to C).
_RANK = "ts_rank('{{0.1, 0.2, 0.4, 1.0}}', {tsv}, q.query)::numeric::float8"

_BRANCHES = {
    "event": f"""
        SELECT 'event' AS kind, e.id, e.title, e.description, e.image_url,
               e.slug::text AS slug, e.start_time AS date_info,
               p.platform_id::text AS handle, {_RANK.format(tsv='e.search_tsv')} AS rank,
               {visibility.columns('$3')}
        FROM q, events e {visibility.join_profile('e', '$3')}
        WHERE e.search_tsv @@ q.query AND {visibility.visible('e', '$3')}
    """,
    "series": f"""
        SELECT 'series' AS kind, s.id, s.name AS title, s.description,
               NULL::text AS image_url, s.slug::text AS slug, NULL::timestamptz AS date_info,
               p.platform_id::text AS handle, {_RANK.format(tsv='s.search_tsv')} AS rank,
               {visibility.columns('$3')}
        FROM q, series s {visibility.join_profile('s', '$3')}
        WHERE s.search_tsv @@ q.query AND {visibility.visible('s', '$3')}
    """,
    # A profile is found by those who may retrieve it: `profile_visible`.
    "profile": f"""
        SELECT * FROM (
            SELECT 'profile' AS kind, p.id, p.display_name AS title, p.description,
                   p.profile_image_url AS image_url, p.platform_id::text AS slug,
                   NULL::timestamptz AS date_info, p.platform_id::text AS handle,
                   {_RANK.format(tsv='p.search_tsv')} AS rank, {visibility.columns('$3')}
            FROM q, profiles p
            LEFT JOIN organization_members m
              ON m.organization_id = p.organization_id AND m.user_id = $3
            WHERE p.search_tsv @@ q.query
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
        SELECT {_PARSED.format(config='english')} || {_PARSED.format(config='simple')} AS query
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
