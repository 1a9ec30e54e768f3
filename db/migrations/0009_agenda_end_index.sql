-- The agenda reads one-off items by where they end: an item meets the window
-- only if it ends after the window starts, so items long past are never read.
-- calendar_events_start (by start) bounded them from above only, and an agenda
-- over a calendar with years of history read all of it.
CREATE INDEX calendar_events_one_off_end
    ON calendar_events (calendar_id, (coalesce(end_time, start_time)), start_time)
    WHERE recurrence_rule IS NULL AND NOT is_all_day AND status <> 'cancelled';
CREATE INDEX calendar_events_all_day_end
    ON calendar_events (calendar_id, end_date, start_date)
    WHERE recurrence_rule IS NULL AND is_all_day AND status <> 'cancelled';
