-- One occurrence of a recurring event changed or cancelled on its own (RFC 5545
-- RECURRENCE-ID and EXDATE; docs/occurrences.md, "Data model"). A row exists only
-- for an occurrence that differs from what the event's rule makes of it: the
-- expansion (kalends/expansion.py) applies the rows of an event to its occurrences.
CREATE TABLE event_occurrences (
    event_id text NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    -- the occurrence_id after "<event_id>:": YYYYMMDDTHHMMSSZ (timed, the original
    -- start in UTC) or YYYYMMDD (all-day)
    slot text NOT NULL CHECK (slot ~ '^[0-9]{8}(T[0-9]{6}Z)?$'),
    -- the slot's instant (all-day: the date's midnight UTC)
    original_start timestamptz NOT NULL,
    status text NOT NULL DEFAULT 'scheduled' CHECK (status IN ('scheduled', 'cancelled')),
    cancellation_reason text,
    -- own values of title/description/location (a key present = changed, its value
    -- may be null)
    changes jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(changes) = 'object'),
    -- a moved timed occurrence (null: where the rule places it)
    start_time timestamptz,
    end_time timestamptz,
    start_timezone text,
    end_timezone text,
    -- a moved all-day occurrence (null: the rule's)
    start_date date,
    end_date date,
    -- bumped on every change of this row (iCalendar SEQUENCE of the override)
    sequence integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, slot),
    CHECK (end_time IS NULL OR start_time IS NULL OR end_time > start_time),
    CHECK (end_date IS NULL OR start_date IS NULL OR end_date > start_date)
);

-- What a reader of a window reads (db/occurrences.py, `in_window`), by index ranges
-- that follow the window, not the event's history: the rows whose slot lies near
-- the window, and those moved far from their slot, which are few. "Far": moved more
-- than 7 days earlier, or ending more than 8 days after the slot, or an all-day one
-- moved (the predicate is written again, word for word, in the query).
CREATE INDEX event_occurrences_slots ON event_occurrences (event_id, original_start);
CREATE INDEX event_occurrences_far ON event_occurrences (event_id)
    WHERE start_date IS NOT NULL
       OR original_start - start_time > interval '7 days'
       OR coalesce(end_time, start_time) - original_start > interval '8 days';

-- Occurrences moved in time, by where they now lie: the agenda and free/busy read a
-- recurring copy whose series' own range misses a window when one of its source's
-- occurrences was moved into that window (db/agenda.py).
CREATE INDEX event_occurrences_moved_times ON event_occurrences
    USING gist (tstzrange(start_time, coalesce(end_time, start_time), '[]'))
    WHERE start_time IS NOT NULL;
CREATE INDEX event_occurrences_moved_dates ON event_occurrences
    USING gist (daterange(start_date, end_date))
    WHERE start_date IS NOT NULL;
