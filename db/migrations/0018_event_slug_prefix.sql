-- The derived-slug lookup (db/events.py: slugs_with_prefix) reads the slugs a
-- new derivation can collide with, `base` and `base-…`, as one index range on
-- the lowered slug in byte order: without it every event of the profile was
-- read and filtered (citext's unique index gives no prefix range).
CREATE INDEX events_profile_slug_prefix
    ON events (profile_id, lower(slug::text) text_pattern_ops);
