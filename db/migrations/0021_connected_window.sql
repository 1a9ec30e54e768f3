-- The agenda reads a connected calendar's components by where they lie in time,
-- bounded on both sides (db/connected.py: agenda_events), so that neither years of
-- history nor a far future are read for a window.
--
-- Components that last at most a week (nearly all of them) are found by their
-- start, which lies within a week before the window: external_events_window.
-- The others, recurring ones without a known end and long ones, are found by
-- where they end (never: infinity), from this partial index; those that ended
-- before the window are not read.
CREATE INDEX external_events_long ON external_events
    (calendar_id, (coalesce(span_end, 'infinity'::timestamptz)))
    WHERE span_end IS NULL OR span_end - span_start > interval '7 days';
