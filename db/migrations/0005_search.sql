-- Full-text search over events, profiles and series (GET /v1/search).
--
-- Each searchable table gets a generated tsvector column, kept current by
-- PostgreSQL itself on every insert and update, and a GIN index on it.
--
-- Text search configurations, chosen per field:
-- * Words people write (titles, names, descriptions, locations) are indexed
--   twice: with `english`, so "classes" finds "class" and "running" finds
--   "runs"; and with `simple`, the words as written, lower-cased. `simple`
--   keeps stop words (a band called "The Who" stays findable by its name) and
--   lets the prefix match of the last word being typed see the word itself
--   rather than its stem: the english stem of "meditation" is "medit", which
--   "medita:*" would never reach. The query is parsed with both configurations
--   and ORed (db/search.py), so either form matches.
-- * A handle (platform_id) is an identifier, not language: `simple` only,
--   never stemmed. It is indexed whole ("yoga_studio.sf" is one token for the
--   default parser) and split at `_`, `.` and `-`, so each part is a word too.
--
-- Weights rank a match in a title, name or handle (A) over one in a description
-- (B), over one in an event's location (C).

-- The words of one field, weighted, in both forms. `||` numbers the right-hand
-- words after the left-hand ones, so a one-lexeme gap (a single space: no
-- parser ever makes that lexeme) follows each form: without it, the last word
-- of one form and the first of the next would be adjacent, and the phrase
-- "night jazz" would match "jazz night", or span two fields.
CREATE FUNCTION search_words(body text, weight "char") RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT setweight(to_tsvector('english', coalesce(body, '')) || ''' '':1'::tsvector
                     || to_tsvector('simple', coalesce(body, '')) || ''' '':1'::tsvector,
                     weight)
$$;

ALTER TABLE events ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS (
    search_words(title, 'A') || search_words(description, 'B') || search_words(location, 'C')
) STORED;
CREATE INDEX events_search ON events USING gin (search_tsv);

ALTER TABLE profiles ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('simple', platform_id::text)
              || to_tsvector('simple', translate(platform_id::text, '_.-', '   ')), 'A')
    || search_words(display_name, 'A') || search_words(description, 'B')
) STORED;
CREATE INDEX profiles_search ON profiles USING gin (search_tsv);

ALTER TABLE series ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS (
    search_words(name, 'A') || search_words(description, 'B')
) STORED;
CREATE INDEX series_search ON series USING gin (search_tsv);
