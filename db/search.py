"""Full-text search over events, profiles and series, ranked without reading
every match.

The tsvector columns and their GIN indexes are in migrations 0005, 0016 and 0020. The
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
a profile's or series' creation; then id.

Tier 3 is read first, in one of three ways, so that no page counts or sorts
the matches of a common word:
- A word the statistics count in more than TITLE_CAP titles, and often enough
  for a page within half a walk (`search_title_words`: ANALYZE's most common
  elements of `title_tsv`, refreshed by `refresh_words` once ANALYZE has
  gathered newer ones: `WordsWatch`), walks
  `events_search_order` (rank order, the title's words included) and tests
  each entry's words in the index alone, stopping at the page's end or after
  WALK entries: the first page of a word in 1 % of titles reads about 2,100
  index entries and no row that does not match (at a million events, 4 ms
  instead of 40). Should the walk not fill the page (the statistics were
  wrong, or the matches are private), the next way is taken in the same
  statement.
- Otherwise the events among the first TITLE_CAP + 1 visible title matches are
  read through the GIN index of titles, in no order, and sorted whole.
- A word found in more titles than that (one the statistics missed, or too
  rare for a walk of WALK entries) is walked by one more statement without the
  bound, with bitmap scans off so that the planner cannot sort every match
  instead.
The statistics only choose the way: every way gives the same page.

If titles do not fill the page, tiers 2 and 1 follow in the same statement
(`sql_rest` alone on the pages past titles): every match below titles, through
the GIN indexes, sorted (a word common in descriptions but rare in titles costs
what its description matches cost, as every search did before tiers). The
statements of a page run with generic plans, in one transaction.

Visibility is decided in the statements, by the same SQL as every other read
(db/visibility.py): events and series by their profile's rule, profiles by
`profile_visible`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from db import visibility
from db.database import Database

KINDS = ("event", "profile", "series")
TIERS = (3, 2, 1)
# A word found in more titles than this is read in rank order through
# events_search_order; one found in fewer, all of its title matches are sorted.
TITLE_CAP = 1000
# The most entries of events_search_order one walk tests: an index-only read of
# about 20 ms at most (0.65 us an entry on 2 shared cores); a page of 21 in it
# when the word is in 1 title in 700 or more.
WALK = 30_000
# A page's statements run in one transaction with generic plans: they do not
# depend on the word (see `sql_titles`), and planning them anew for each request
# (PostgreSQL's choice for them) took 3 ms, more than running them.
GENERIC = "SET LOCAL plan_cache_mode = force_generic_plan"
# For the unbounded walk: neither a bitmap nor a sequential scan, which would
# read and sort every match; then the defaults again for the statement after it.
ORDERED = ("SELECT set_config('enable_bitmapscan', 'off', true),"
           " set_config('enable_seqscan', 'off', true)")
UNORDERED = "SET LOCAL enable_bitmapscan TO DEFAULT; SET LOCAL enable_seqscan TO DEFAULT"
# The day's share of a rank: days since 1970 divided by this stay below 0.3
# until the year 29349, so tiers never meet, and tier + day / 10^7 is exact
# in a float8 (8 significant digits): ranks order as (tier, day) do.
_DAY_SCALE = 10_000_000

# Parameters: $1 the text, $2 whether its last word is a prefix, $3 the viewer,
# $4 the row count; then `sql_titles` takes the cap as $5 and a keyset (negated
# day, id) as $6, $7; `sql_ordered_events` that keyset as $5, $6; `sql_rest` a
# keyset (rank, id) as $5, $6.


def _parsed(config: str) -> str:
    """$1 as a tsquery; with $2, its final operand `'word'` becomes `'word':*`."""
    return (f"regexp_replace(websearch_to_tsquery('{config}', $1::text)::text, '''$', "
            "CASE WHEN $2::boolean THEN ''':*' ELSE '''' END)::tsquery")


def _weighted(query: str, weights: str) -> str:
    """`query` with every operand restricted to `weights`: `'w'` → `'w':A`,
    `'w':*` → `'w':*A` (a quoted lexeme doubles its own quotes)."""
    return (f"regexp_replace(({query})::text, '(''(?:[^'']|'''')*'')(?::(\\*))?', "
            f"'\\1:\\2{weights}', 'g')::tsquery")


# The query, parsed once per statement, and its restrictions to weights: InitPlans
# over a materialized CTE, and plain `column @@ value` restrictions that the GIN
# indexes serve. Plans do not depend on the word (a generic plan serves every
# one): `sql_titles` chooses how tier 3 is read as it runs, and `page` walks
# without a bound when it says the title matches passed the cap.
_QUERY = f"({_parsed('english')} || {_parsed('simple')})"
_CTE = f"""WITH q AS MATERIALIZED (
        SELECT query, {_weighted('query', 'A')} AS query_a, {_weighted('query', 'AB')} AS query_ab
        FROM (SELECT {_QUERY} AS query) parsed
    )"""
_FROM_CTE = {"": "(SELECT query FROM q)", "A": "(SELECT query_a FROM q)",
             "AB": "(SELECT query_ab FROM q)"}


def _matches(tsv: str, titles: bool, title_tsv: str | None, negated: bool) -> str:
    """`tsv` holds the whole query in its titles (tier 3), or only elsewhere
    (tiers 2 and 1). `title_tsv`: the column holding weight A alone (events)."""
    q = _FROM_CTE
    in_titles = f"{title_tsv} @@ {q['']}" if title_tsv else f"{tsv} @@ {q['A']}"
    if not titles:
        return f"{tsv} @@ {q['']} AND NOT {in_titles}"
    # A restricted query only looks at its fields: `yoga -hot` restricted to
    # titles holds for a hot yoga class whose description says hot. The whole
    # query excludes it, when there is something to exclude.
    return f"{in_titles} AND {tsv} @@ {q['']}" if negated else in_titles


def _rank(tsv: str, titles: bool, day: str) -> str:
    tier = "3" if titles else f"CASE WHEN {tsv} @@ {_FROM_CTE['AB']} THEN 2 ELSE 1 END"
    return f"({tier} + {day}::numeric / {_DAY_SCALE})::float8"


_COLUMNS = {
    "event": "'event' AS kind, e.id, e.title, e.description, e.image_url, "
             "e.slug::text AS slug, e.start_time AS date_info, p.platform_id::text AS handle",
    "series": "'series' AS kind, s.id, s.name AS title, s.description, "
              "NULL::text AS image_url, s.slug::text AS slug, "
              "NULL::timestamptz AS date_info, p.platform_id::text AS handle",
    "profile": "'profile' AS kind, p.id, p.display_name AS title, p.description, "
               "p.profile_image_url AS image_url, p.platform_id::text AS slug, "
               "NULL::timestamptz AS date_info, p.platform_id::text AS handle",
}
_TABLES = {"event": ("events", "e", "start_time"), "series": ("series", "s", "created_at"),
           "profile": ("profiles", "p", "created_at")}


def _branch(kind: str, titles: bool, negated: bool, keyset: str | None,
            first: str | None = None) -> str:
    """One kind's next `$4` hits in tier 3 (`titles`), or in tiers 2 and 1.
    `keyset`: the first of the two parameters the page starts after. `first`: the
    first this many matches in no order instead, with their `day_key`."""
    table, alias, day_of = _TABLES[kind]
    tsv = f"{alias}.search_tsv"
    rank = _rank(tsv, titles, f"search_day({alias}.{day_of})")
    if titles:  # in the order of events_search_order
        order = f"-search_day({alias}.{day_of}), {alias}.id"
        after = (f"AND (-search_day({alias}.{day_of}), {alias}.id)"
                 f" > ({keyset}::integer, ${int(keyset[1:]) + 1}::text)" if keyset else "")
    else:  # every match, sorted
        order = "rank DESC, id"
        after = (f"AND ({rank} < {keyset}::float8 OR ({rank} = {keyset}::float8"
                 f" AND {alias}.id > ${int(keyset[1:]) + 1}::text))" if keyset else "")
    matches = _matches(tsv, titles, "e.title_tsv" if kind == "event" else None, negated)
    tail = f"ORDER BY {order} LIMIT $4"
    if first:
        rank = f"{rank} AS rank, -search_day({alias}.{day_of}) AS day_key"
        tail = f"LIMIT {first}"
    else:
        rank = f"{rank} AS rank"
    if kind == "profile":
        # A profile is found by those who may retrieve it: `profile_visible`.
        return f"""
        SELECT {_COLUMNS[kind]}, {rank}, {visibility.columns('$3')}
        FROM profiles p
        LEFT JOIN organization_members m
          ON m.organization_id = p.organization_id AND m.user_id = $3
        WHERE {matches} AND {visibility.profile_visible('$3')} {after}
        {tail}"""
    return f"""
        SELECT {_COLUMNS[kind]}, {rank}, {visibility.columns('$3')}
        FROM {table} {alias} {visibility.join_profile(alias, '$3')}
        WHERE {matches} AND {visibility.visible(alias, '$3')} {after}
        {tail}"""


def _walked(negated: bool, keyset: str | None, bound: int | None = WALK) -> str:
    """Tier 3's next `$4` events by walking events_search_order: of its first
    `bound` entries after the keyset (None: all), those whose title words match,
    tested in the index alone; only those rows are then read, for visibility and
    what the page shows."""
    after = (f"WHERE (-search_day(start_time), id) > ({keyset}::integer,"
             f" ${int(keyset[1:]) + 1}::text)" if keyset else "")
    negation = f"AND e.search_tsv @@ {_FROM_CTE['']}" if negated else ""
    return f"""
        SELECT {_COLUMNS['event']},
               {_rank('e.search_tsv', True, 'search_day(e.start_time)')} AS rank,
               {visibility.columns('$3')}
        FROM (
            SELECT w.id, w.day_key FROM (
                SELECT id, -search_day(start_time) AS day_key, title_tsv FROM events {after}
                ORDER BY -search_day(start_time), id {f"LIMIT {bound}" if bound else ""}
            ) w
            WHERE w.title_tsv @@ {_FROM_CTE['']}
        ) hit
        JOIN events e ON e.id = hit.id {visibility.join_profile('e', '$3')}
        WHERE {visibility.visible('e', '$3')} {negation}
        ORDER BY hit.day_key, hit.id
        LIMIT $4"""


# Whether to walk: the least common of the words as typed (their `simple` parse)
# is in more than `$5` titles, and common enough that a page is expected within
# half a walk. A word that `search_title_words` does not list counts as in no
# title. For one word this is a floor (its stems and prefixes may match more
# titles); for several it is a ceiling, and a walk that finds too few falls back.
_WALK = f"""
        SELECT coalesce(min(coalesce(w.titles, 0)), 0) > $5::integer
               AND coalesce(min(coalesce(w.share, 0)), 0) * {WALK} >= 2 * $4::integer AS walk
        FROM regexp_matches(websearch_to_tsquery('simple', $1::text)::text,
                            '''((?:[^'']|'''')*)''', 'g') AS m
        LEFT JOIN search_title_words w ON w.lexeme = replace(m[1], '''''', '''')"""


_OUT = """kind, id, title, description, image_url, slug, date_info, rank,
           CASE WHEN profile_visible THEN handle END AS profile_handle"""
_FIELDS = """kind, id, title, description, image_url, slug, date_info, handle, rank,
               owner_user_id, viewer_role, profile_visible"""


@functools.cache
def sql_titles(kinds: tuple[str, ...], negated: bool, keyset: bool) -> str:
    """Tier 3 of these kinds (a non-empty subset of KINDS), each kind's next `$4`
    hits, unmerged. Events are walked in rank order if the word is common
    (`_walked`); if not, or if the walk did not fill the page, they are found among
    their first `$5` + 1 visible title matches, read in no order through the GIN
    index, and every row says whether there were more (`capped`): then
    events_search_order must be read instead (`sql_ordered_events`). One row with a
    null `kind` at least, so the answer is never empty."""
    after = "$6" if keyset else None
    ctes = ""
    capped = "$5::integer < 0"  # no events: never (and $5 is still a parameter)
    if "event" in kinds:
        # Each CTE runs only when first read, and each InitPlan when first needed
        # (the CASEs below), so a walked page never reads the GIN index, and a rare
        # word never walks.
        ctes = f""",
    walk AS MATERIALIZED ({_WALK}),
    walked AS MATERIALIZED ({_walked(negated, after)}),
    matched AS MATERIALIZED ({_branch(
            'event', True, negated, after, first='$5::integer + 1')}),
    done AS MATERIALIZED (
        SELECT CASE WHEN (SELECT walk FROM walk)
                    THEN (SELECT count(*) FROM walked) >= $4::integer ELSE false END AS walked
    )"""
        capped = ("CASE WHEN (SELECT walked FROM done) THEN false"
                  " ELSE (SELECT count(*) FROM matched) > $5::integer END")
    events = f"""SELECT {_FIELDS} FROM walked WHERE (SELECT walked FROM done))
    UNION ALL
    (SELECT {_FIELDS} FROM matched WHERE NOT (SELECT walked FROM done)
        ORDER BY day_key, id LIMIT $4"""
    branches = "\n    UNION ALL\n".join(
        f"({events if k == 'event' else _branch(k, True, negated, after)})"
        for k in KINDS if k in kinds)
    # Titles that do not fill the page are followed by the tiers below, in the same
    # statement (a rare word's page in one): every rank below 3 sorts after them.
    below = "\n    UNION ALL\n".join(
        f"({_branch(k, False, negated, None)})" for k in KINDS if k in kinds)
    return f"""
    {_CTE}{ctes},
    titles AS MATERIALIZED ({branches}),
    below AS MATERIALIZED (
        SELECT * FROM ({below}) hits WHERE (SELECT count(*) FROM titles) < $4::integer
        ORDER BY rank DESC, id
        LIMIT greatest($4::integer - (SELECT count(*) FROM titles), 0)
    )
    SELECT {_OUT}, flag.capped
    FROM (SELECT {capped} AS capped) flag
    LEFT JOIN (SELECT * FROM titles UNION ALL SELECT * FROM below) hits ON true
    """


@functools.cache
def sql_ordered_events(negated: bool, keyset: bool) -> str:
    """The next `$4` events of tier 3 in events_search_order: for a word found in
    more titles than `sql_titles` reads, with bitmap and sequential scans off
    (`ORDERED`)."""
    return f"""
    {_CTE}
    SELECT {_OUT}
    FROM ({_walked(negated, '$5' if keyset else None, bound=None)}) hits
    """


@functools.cache
def sql_rest(kinds: tuple[str, ...], negated: bool, keyset: bool) -> str:
    """The next `$4` hits of tiers 2 and 1 among these kinds, by rank descending,
    then id: every match below titles, read through the GIN indexes and sorted."""
    branches = "\n    UNION ALL\n".join(
        f"({_branch(k, False, negated, '$5' if keyset else None)})"
        for k in KINDS if k in kinds)
    return f"""
    {_CTE}
    SELECT {_OUT}
    FROM ({branches}) hits
    ORDER BY rank DESC, id
    LIMIT $4
    """




# `-word` (after a space or at the start) excludes a word in web-search syntax.
_NEGATION = re.compile(r"(?:^|\s)-")


def is_negated(text: str) -> bool:
    """Whether the text may exclude words (a quoted `-` counts: harmless)."""
    return bool(_NEGATION.search(text))


def title_key(rank: float) -> int:
    """The negated day of a tier-3 rank: its place in events_search_order."""
    return -round((rank - 3) * _DAY_SCALE)


async def page(
    db: Database, kinds: Sequence[str], text: str, prefix: bool, viewer_id: str,
    after: tuple[float, str] | None, limit: int,
) -> list[asyncpg.Record]:
    """Up to `limit` hits after the keyset `after` (rank, id): titles first, then
    the tiers below if the page is not full (`sql_titles`), or, past titles, the
    tiers below alone (`sql_rest`)."""
    chosen = tuple(k for k in KINDS if k in kinds)
    negated = is_negated(text)
    head = (text, prefix, viewer_id)
    async with db.transaction() as tx:
        await tx.execute(GENERIC)
        if after is None or round(after[0]) == TIERS[0]:
            key = (title_key(after[0]), after[1]) if after else ()
            found = await tx.fetch(sql_titles(chosen, negated, bool(key)), *head, limit,
                                   TITLE_CAP, *key)
            hits = [r for r in found if r["kind"] is not None]
            if found[0]["capped"]:
                await tx.execute(ORDERED)
                events = await tx.fetch(sql_ordered_events(negated, bool(key)), *head, limit,
                                        *key)
                await tx.execute(UNORDERED)
                hits = [r for r in hits if r["kind"] != "event"] + events
            # Below titles only when they did not fill the page: then it is full, or
            # there is nothing more.
            return sorted(hits, key=lambda r: (-r["rank"], r["id"]))[:limit]
        return await tx.fetch(sql_rest(chosen, negated, True), *head, limit, *after)


async def refresh_words(db: Database) -> None:
    """Copy the statistics' most common title words into `search_title_words`,
    which decides whether a word's titles are walked (`sql_titles`). Run after
    ANALYZE has seen the titles (`WordsWatch` does, in the service). Readers are
    not blocked."""
    await db.execute(REFRESH_WORDS)


class WordsWatch:
    """Keeps `search_title_words` in step with the statistics it copies: `check`,
    run every WATCH_SECONDS, refreshes the list when `events` has been analyzed
    (ANALYZE by hand, or autovacuum's) since the last look, so a bulk load's
    common words are walked within a minute of the ANALYZE that sees them (an
    hourly refresh left them unwalked for up to an hour).

    A look costs one row of `pg_stat_user_tables`. Only when the table's last
    analyze is newer than the one seen is the list compared with the statistics
    (what the refresh itself would compute) and refreshed if they differ: in
    several processes, each sees the analyze once, and the first to act leaves
    the others nothing to do. The first look of a process compares, so a list
    gone stale while no process watched is caught up then."""

    def __init__(self) -> None:
        self._looked = False
        self._seen: datetime | None = None
        self._differs: str | None = None

    async def check(self, db: Database) -> bool:
        """Refresh the list if the statistics are newer than it; whether it did."""
        analyzed = await db.fetchval(_LAST_ANALYZED)
        if self._looked and (analyzed is None or (
                self._seen is not None and analyzed <= self._seen)):
            return False
        if self._differs is None:
            self._differs = _differs(await db.fetchval(_WORDS_DEFINITION))
        stale = bool(await db.fetchval(self._differs))
        # Seen only once acted on: a failed refresh is tried again at the next look.
        if stale:
            await refresh_words(db)
        self._looked, self._seen = True, analyzed
        return stale


# How often the service looks at the statistics' time: a single-row read.
WATCH_SECONDS = 30
# When `events` was last analyzed; null when never (or the statistics were reset).
_LAST_ANALYZED = """
SELECT greatest(last_analyze, last_autoanalyze) FROM pg_stat_user_tables
WHERE relid = 'events'::regclass"""
# The list's own query (migration 0020), as the server keeps it: compared to what
# the list holds, whatever a later migration makes of it.
_WORDS_DEFINITION = "SELECT pg_get_viewdef('search_title_words'::regclass)"


def _differs(definition: str) -> str:
    """Whether the list differs from what a refresh would make of it now."""
    now = f"SELECT lexeme, share, titles FROM ({definition.strip().rstrip(';')}) d"
    held = "SELECT lexeme, share, titles FROM search_title_words"
    return f"SELECT EXISTS ({now} EXCEPT {held}) OR EXISTS ({held} EXCEPT {now})"


REFRESH_WORDS = "REFRESH MATERIALIZED VIEW CONCURRENTLY search_title_words"
