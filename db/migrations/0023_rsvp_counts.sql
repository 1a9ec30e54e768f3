-- Each event's RSVPs counted by status, kept by the database itself: an RSVP summary
-- (db/events.py) over a busy year reads one row per event instead of every RSVP.
-- Statement triggers with transition tables keep a bulk write (a cascade, a COPY)
-- to one counter update per event it touched.
CREATE TABLE rsvp_counts (
    event_id text PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    going integer NOT NULL DEFAULT 0,
    maybe integer NOT NULL DEFAULT 0,
    not_going integer NOT NULL DEFAULT 0,
    waitlist integer NOT NULL DEFAULT 0
);

INSERT INTO rsvp_counts (event_id, going, maybe, not_going, waitlist)
SELECT event_id,
       count(*) FILTER (WHERE status = 'going'),
       count(*) FILTER (WHERE status = 'maybe'),
       count(*) FILTER (WHERE status = 'not_going'),
       count(*) FILTER (WHERE status = 'waitlist')
FROM rsvps GROUP BY event_id;

CREATE FUNCTION rsvp_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rsvp_counts AS c (event_id, going, maybe, not_going, waitlist)
    SELECT event_id,
           count(*) FILTER (WHERE status = 'going'),
           count(*) FILTER (WHERE status = 'maybe'),
           count(*) FILTER (WHERE status = 'not_going'),
           count(*) FILTER (WHERE status = 'waitlist')
    FROM added GROUP BY event_id ORDER BY event_id
    ON CONFLICT (event_id) DO UPDATE SET going = c.going + excluded.going,
        maybe = c.maybe + excluded.maybe, not_going = c.not_going + excluded.not_going,
        waitlist = c.waitlist + excluded.waitlist;
    RETURN NULL;
END $$;

CREATE FUNCTION rsvp_counts_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- An event deleted with its RSVPs has lost its counter row too: nothing to update.
    UPDATE rsvp_counts c SET going = c.going - d.going, maybe = c.maybe - d.maybe,
        not_going = c.not_going - d.not_going, waitlist = c.waitlist - d.waitlist
    FROM (SELECT event_id,
                 count(*) FILTER (WHERE status = 'going') AS going,
                 count(*) FILTER (WHERE status = 'maybe') AS maybe,
                 count(*) FILTER (WHERE status = 'not_going') AS not_going,
                 count(*) FILTER (WHERE status = 'waitlist') AS waitlist
          FROM removed GROUP BY event_id) d
    WHERE c.event_id = d.event_id;
    RETURN NULL;
END $$;

CREATE FUNCTION rsvp_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rsvp_counts AS c (event_id, going, maybe, not_going, waitlist)
    SELECT event_id, sum(d * (status = 'going')::int), sum(d * (status = 'maybe')::int),
           sum(d * (status = 'not_going')::int), sum(d * (status = 'waitlist')::int)
    FROM (SELECT event_id, status, 1 AS d FROM added
          UNION ALL SELECT event_id, status, -1 FROM removed) t
    GROUP BY event_id ORDER BY event_id
    ON CONFLICT (event_id) DO UPDATE SET going = c.going + excluded.going,
        maybe = c.maybe + excluded.maybe, not_going = c.not_going + excluded.not_going,
        waitlist = c.waitlist + excluded.waitlist;
    RETURN NULL;
END $$;

CREATE TRIGGER rsvps_counted_insert AFTER INSERT ON rsvps
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION rsvp_counts_add();
CREATE TRIGGER rsvps_counted_delete AFTER DELETE ON rsvps
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION rsvp_counts_remove();
CREATE TRIGGER rsvps_counted_update AFTER UPDATE ON rsvps
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION rsvp_counts_change();
