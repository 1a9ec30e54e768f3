-- The agenda read every recurring row that began before its window ended, however
-- long ago the series was over: rows are now read by when their last occurrence
-- ends. The end is computed from the rule by the domain (kalends.agenda.series_end,
-- with dateutil; SQL cannot expand a rule):
--   NULL      not known yet: read by every agenda, as before (rows written before
--             this migration, or by a statement that does not compute it, until
--             kalends.agenda.settle_recurrence_ends stores it);
--   infinity  the series never ends (no COUNT or UNTIL), or its end is out of reach;
--   else      an instant at or after the end of its last occurrence.
ALTER TABLE calendar_events ADD COLUMN recurrence_end timestamptz;

-- A stored end is only as good as the times and rule it was computed from. A write
-- that changes them without writing the end (the subscription sync's set-based
-- upsert, say) makes it unknown again rather than wrong: a stale end could hide
-- occurrences, an unknown one only costs a row read.
CREATE FUNCTION calendar_events_forget_recurrence_end() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.recurrence_rule IS NULL THEN
        NEW.recurrence_end := NULL;
    ELSIF NEW.recurrence_end IS NOT DISTINCT FROM OLD.recurrence_end
          AND (NEW.recurrence_rule, NEW.is_all_day, NEW.start_time, NEW.end_time,
               NEW.start_timezone, NEW.start_date, NEW.end_date)
              IS DISTINCT FROM
              (OLD.recurrence_rule, OLD.is_all_day, OLD.start_time, OLD.end_time,
               OLD.start_timezone, OLD.start_date, OLD.end_date) THEN
        NEW.recurrence_end := NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER calendar_events_forget_recurrence_end
    BEFORE UPDATE ON calendar_events
    FOR EACH ROW EXECUTE FUNCTION calendar_events_forget_recurrence_end();

-- The agenda's recurring branch: one index range per calendar, rows whose series
-- ends at or after the window's start (unknown ones sort as never ending). It
-- replaces 0003's calendar_events_recurring, which bounded nothing.
CREATE INDEX calendar_events_recurring_end
    ON calendar_events (calendar_id, (coalesce(recurrence_end, 'infinity'::timestamptz)))
    WHERE recurrence_rule IS NOT NULL AND status <> 'cancelled';
DROP INDEX calendar_events_recurring;

-- What settle_recurrence_ends has left to do: empty once every end is known.
CREATE INDEX calendar_events_recurring_unsettled ON calendar_events (id)
    WHERE recurrence_rule IS NOT NULL AND recurrence_end IS NULL;
