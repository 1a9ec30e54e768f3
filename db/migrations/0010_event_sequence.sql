-- iCalendar's SEQUENCE (RFC 5545 3.8.7.4): the revision of an event as calendars
-- see it, raised by every change to what a calendar shows, whatever the path
-- (update, cancel, reschedule), so an ICS feed and attendee e-mail agree on it.
ALTER TABLE events ADD COLUMN sequence integer NOT NULL DEFAULT 0;

CREATE FUNCTION events_next_sequence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.sequence := OLD.sequence + 1;
    RETURN NEW;
END;
$$;

CREATE TRIGGER events_sequence BEFORE UPDATE ON events FOR EACH ROW
    WHEN ((OLD.title, OLD.description, OLD.location, OLD.start_time, OLD.end_time,
           OLD.start_timezone, OLD.end_timezone, OLD.is_all_day, OLD.start_date,
           OLD.end_date, OLD.recurrence_rule, OLD.status, OLD.transparency)
          IS DISTINCT FROM
          (NEW.title, NEW.description, NEW.location, NEW.start_time, NEW.end_time,
           NEW.start_timezone, NEW.end_timezone, NEW.is_all_day, NEW.start_date,
           NEW.end_date, NEW.recurrence_rule, NEW.status, NEW.transparency))
    EXECUTE FUNCTION events_next_sequence();
