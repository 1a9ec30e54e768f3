"""Full-text search over events, profiles and series, ranked without reading
every match.

The tsvector columns and their GIN indexes are in migrations 0005 and 0016. The
user's text reaches SQL only as a bound parameter: `websearch_to_tsquery` parses
it (quotes, `or`, `-` as a search box does; it never fails on odd input), once
with each configuration the columns are indexed with, and the two are ORed. For
a prefix match of the last word, `:*` is appended to the final operand of the
parsed query's canonical text form, whose every lexeme is quoted, so the edit
cannot change how anything else parses.

Relevance (migration 0016): a hit's rank is its tier plus a fraction of its
day. Tier 3: the whole query is found in the title (an event's) or the name and
handle (a profile's, a series'); tier 2: in those and the description; tier 1:
anywhere, the location included. The same query restricted to weights (`:A`,
`:AB`) decides it. Within a tier the latest day comes first: an event's start,
a profile's or series' creation; then id. So the first page of a word found in
10,000 titles is the first 20 matching rows of `events_search_order` (the
planner's choice when the title statistics say the word is common), not a sort
of all 10,000; a rare word is still read through the GIN index and sorted.

Titles first, then (if the page is not full) the other tiers in a second
statement: a word found in enough titles never reads its descriptions' matches.
Both run with custom plans (`plan_cache_mode`): a cached generic plan would pick
one strategy for rare and common words alike.

Visibility is decided in the statements, by the same SQL as every other read
(db/visibility.py): events and series by their profile's rule, profiles by
`profile_visible`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import asyncpg

from db import visibility
from db.database import Database

KINDS = ("event", "profile", "series")
TIERS = (3, 2, 1)
# The day's share of a rank: days since 1970 divided by this stay below 0.3
# until the year 29349, so tiers never meet, and tier + day / 10^7 is exact
# in a float8 (8 significant digits): ranks order as (tier, day) do.
_DAY_SCALE = 10_000_000

# Parameters: $1 the text, $2 whether its last word is a prefix, $3 the viewer,
# $4 the row count; with a keyset, $5 and $6: the negated day and id the page
# starts after within the statement's tier.


def _parsed(config: str) -> str:
    """$1 as a tsquery; with $2, its final operand `'word'` becomes `'word':*`."""
    return (f"regexp_replace(websearch_to_tsquery('{config}', $1::text)::text, '''$', "
            "CASE WHEN $2::boolean THEN ''':*' ELSE '''' END)::tsquery")


def _weighted(query: str, weights: str) -> str:
    """`query` with every operand restricted to `weights`: `'w'` → `'w':A`,
    `'w':*` → `'w':*A` (a quoted lexeme doubles its own quotes)."""
    return (f"regexp_replace(({query})::text, '(''(?:[^'']|'''')*'')(?::(\\*))?', "
            f"'\\1:\\2{weights}', 'g')::tsquery")


# The query and its restrictions, written out where they are used: every function
# in them is immutable, so with the custom plans `page` asks for, the planner
# folds each into a constant before it plans, and its estimate of how many rows
# match (from the columns' statistics) decides between the ordered index and the
# GIN index. An InitPlan would hide the value: every word would be planned as
# the same default fraction of the table.
_QUERY = f"({_parsed('english')} || {_parsed('simple')})"
_Q = {"": _QUERY, "A": _weighted(_QUERY, "A"), "AB": _weighted(_QUERY, "AB")}


def _matches(tsv: str, titles: bool, title_tsv: str | None, negated: bool) -> str:
    """`tsv` holds the whole query in its titles (tier 3), or only elsewhere
    (tiers 2 and 1). `title_tsv`: the column holding weight A alone (events),
    whose statistics the planner uses."""
    in_titles = f"{title_tsv} @@ {_Q['']}" if title_tsv else f"{tsv} @@ {_Q['A']}"
    if not titles:
        return f"{tsv} @@ {_Q['']} AND NOT {in_titles}"
    # A restricted query only looks at its fields: `yoga -hot` restricted to
    # titles holds for a hot yoga class whose description says hot. The whole
    # query excludes it, when there is something to exclude.
    return f"{in_titles} AND {tsv} @@ {_Q['']}" if negated else in_titles


def _rank(tsv: str, titles: bool, day: str) -> str:
    tier = "3" if titles else f"CASE WHEN {tsv} @@ {_Q['AB']} THEN 2 ELSE 1 END"
    return f"({tier} + {day}::numeric / {_DAY_SCALE})::float8"


def _branch(kind: str, titles: bool, negated: bool, keyset: bool) -> str:
    table, alias, day_of = {"event": ("events", "e", "start_time"),
                            "series": ("series", "s", "created_at"),
                            "profile": ("profiles", "p", "created_at")}[kind]
    tsv = f"{alias}.search_tsv"
    rank = _rank(tsv, titles, f"search_day({alias}.{day_of})")
    if titles:  # in the order of events_search_order
        order = f"-search_day({alias}.{day_of}), {alias}.id"
        after = f"AND (-search_day({alias}.{day_of}), {alias}.id) > ($5::integer, $6::text)"
    else:  # every match, sorted
        order = "rank DESC, id"
        after = f"AND ({rank} < $5::float8 OR ({rank} = $5::float8 AND {alias}.id > $6::text))"
    after = after if keyset else ""
    matches = _matches(tsv, titles, "e.title_tsv" if kind == "event" else None, negated)
    columns = {
        "event": "'event' AS kind, e.id, e.title, e.description, e.image_url, "
                 "e.slug::text AS slug, e.start_time AS date_info, "
                 "p.platform_id::text AS handle",
        "series": "'series' AS kind, s.id, s.name AS title, s.description, "
                  "NULL::text AS image_url, s.slug::text AS slug, "
                  "NULL::timestamptz AS date_info, p.platform_id::text AS handle",
        "profile": "'profile' AS kind, p.id, p.display_name AS title, p.description, "
                   "p.profile_image_url AS image_url, p.platform_id::text AS slug, "
                   "NULL::timestamptz AS date_info, p.platform_id::text AS handle",
    }[kind]
    if kind == "profile":
        # A profile is found by those who may retrieve it: `profile_visible`.
        return f"""
        SELECT {columns}, {rank} AS rank, {visibility.columns('$3')}
        FROM profiles p
        LEFT JOIN organization_members m
          ON m.organization_id = p.organization_id AND m.user_id = $3
        WHERE {matches} AND {visibility.profile_visible('$3')} {after}
        ORDER BY {order} LIMIT $4"""
    return f"""
        SELECT {columns}, {rank} AS rank, {visibility.columns('$3')}
        FROM {table} {alias} {visibility.join_profile(alias, '$3')}
        WHERE {matches} AND {visibility.visible(alias, '$3')} {after}
        ORDER BY {order} LIMIT $4"""


@functools.cache
def sql(kinds: tuple[str, ...], titles: bool, negated: bool, keyset: bool) -> str:
    """The statement for the next `$4` hits among these kinds (a non-empty
    subset of KINDS) in tier 3 (`titles`) or in tiers 2 and 1, ordered by rank
    descending, then id. In tier 3 each kind's branch is itself ordered and
    limited, so an index in that order can stop early."""
    branches = "\n    UNION ALL\n".join(
        f"({_branch(k, titles, negated, keyset)})" for k in KINDS if k in kinds)
    return f"""
    SELECT kind, id, title, description, image_url, slug, date_info, rank,
           CASE WHEN profile_visible THEN handle END AS profile_handle
    FROM ({branches}) hits
    ORDER BY rank DESC, id
    LIMIT $4
    """


# The tiers below titles are read in one statement, through the GIN indexes alone.
# Their restriction has no statistics of its own (the query minus the tier above),
# and on a million events the planner took a rare word for a common one and walked
# the whole ordered index (6 s). Read this way, they cost what their matches cost,
# as every search did before tiers: a word common in descriptions but not in
# titles reads all its description matches.
BITMAPS_ONLY = "SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off"


# `-word` (after a space or at the start) excludes a word in web-search syntax.
_NEGATION = re.compile(r"(?:^|\s)-")


def is_negated(text: str) -> bool:
    """Whether the text may exclude words (a quoted `-` counts: harmless)."""
    return bool(_NEGATION.search(text))


def title_key(rank: float) -> int:
    """The negated day of a tier-3 rank: its place in events_search_order."""
    return -round((rank - 3) * _DAY_SCALE)


def arguments(text: str, prefix: bool, viewer_id: str, limit: int,
              keyset: tuple[float, str] | None = None) -> tuple[object, ...]:
    """The parameters of `sql`, in order."""
    return (text, prefix, viewer_id, limit, *(keyset or ()))


async def page(
    db: Database, kinds: Sequence[str], text: str, prefix: bool, viewer_id: str,
    after: tuple[float, str] | None, limit: int,
) -> list[asyncpg.Record]:
    """Up to `limit` hits after the keyset `after` (rank, id): titles first, then
    the rest if the page is not full."""
    chosen = tuple(k for k in KINDS if k in kinds)
    negated = is_negated(text)
    in_titles = after is None or round(after[0]) == TIERS[0]
    rows: list[asyncpg.Record] = []
    async with db.transaction() as tx:
        await tx.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        if in_titles:
            keyset: tuple[float, str] | None = (title_key(after[0]), after[1]) if after else None
            rows += await tx.fetch(sql(chosen, True, negated, keyset is not None),
                                   *arguments(text, prefix, viewer_id, limit, keyset))
        if len(rows) < limit:
            await tx.execute(BITMAPS_ONLY)
            keyset = None if in_titles or after is None else after
            rows += await tx.fetch(sql(chosen, False, negated, keyset is not None),
                                   *arguments(text, prefix, viewer_id, limit - len(rows),
                                              keyset))
    return rows
