-- Search ranks without reading every match (db/search.py).
--
-- A hit's rank is its tier (3: the whole query is found in the title or name;
-- 2: in title and description; 1: anywhere, the location included) plus a
-- fraction that grows with its day: an event's start, a profile's or series'
-- creation. Within a tier, hits come latest day first, so the first page of a
-- common word is the first rows of an index in that order that match, not a
-- sort of every match.

-- Whole days since 1970-01-01 UTC: the epoch of an instant does not depend on
-- the session's time zone, so this is immutable, and indexable.
CREATE FUNCTION search_day(at timestamptz) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT floor(extract(epoch FROM at) / 86400)::integer $$;

-- The title's words alone, as search_words writes them into search_tsv (weight
-- A), with a GIN index of their own: tier 3's matches are counted and read
-- without the descriptions' and locations' matches.
ALTER TABLE events ADD COLUMN title_tsv tsvector
    GENERATED ALWAYS AS (search_words(title, 'A')) STORED;
CREATE INDEX events_title_search ON events USING gin (title_tsv);

-- Latest day first, then id: the order of hits within a tier.
CREATE INDEX events_search_order ON events ((-search_day(start_time)), id);
