-- A common word's first page without counting its matches (db/search.py).
--
-- The rank-order index carries the title's words (and start_time, which its key
-- is computed from, so that the planner can answer from the index alone): the
-- first titles holding a common word are found by walking the index and testing
-- each entry's words, without visiting the rows that do not match.
DROP INDEX events_search_order;
CREATE INDEX events_search_order ON events ((-search_day(start_time)), id)
    INCLUDE (start_time, title_tsv);

-- How many titles hold each of the most common title words, as the statistics
-- of `events.title_tsv` estimate it (ANALYZE's most common elements: the 1,000
-- or so lexemes above about 1 title in 2,000). Refreshed in the background
-- (db/search.py: refresh_words); a word not listed takes the path of rare words.
-- (`'events'::regclass` is resolved here, once: a refresh runs with a search_path
-- of its own.)
CREATE MATERIALIZED VIEW search_title_words AS
SELECT w.lexeme, w.share::float8 AS share,
       (w.share * greatest(c.reltuples, 0))::bigint AS titles
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname
CROSS JOIN LATERAL unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs)
    AS w(lexeme, share)
WHERE c.oid = 'events'::regclass AND s.attname = 'title_tsv' AND w.lexeme IS NOT NULL;
CREATE UNIQUE INDEX search_title_words_lexeme ON search_title_words (lexeme);
