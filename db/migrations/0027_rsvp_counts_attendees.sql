-- The people going to each event with their guests (the sum of num_guests over going
-- RSVPs, as capacity counts them), kept beside the counts by status: an RSVP summary
-- answers `total_attendees` per bucket from one row per event (docs/graphql.md).
ALTER TABLE rsvp_counts ADD COLUMN total_attendees integer NOT NULL DEFAULT 0;

UPDATE rsvp_counts c SET total_attendees = t.n
FROM (SELECT event_id, sum(num_guests) AS n FROM rsvps WHERE status = 'going'
      GROUP BY event_id) t
WHERE c.event_id = t.event_id;

CREATE OR REPLACE FUNCTION rsvp_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rsvp_counts AS c (event_id, going, maybe, not_going, waitlist, total_attendees)
    SELECT event_id,
           count(*) FILTER (WHERE status = 'going'),
           count(*) FILTER (WHERE status = 'maybe'),
           count(*) FILTER (WHERE status = 'not_going'),
           count(*) FILTER (WHERE status = 'waitlist'),
           coalesce(sum(num_guests) FILTER (WHERE status = 'going'), 0)
    FROM added GROUP BY event_id ORDER BY event_id
    ON CONFLICT (event_id) DO UPDATE SET going = c.going + excluded.going,
        maybe = c.maybe + excluded.maybe, not_going = c.not_going + excluded.not_going,
        waitlist = c.waitlist + excluded.waitlist,
        total_attendees = c.total_attendees + excluded.total_attendees;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION rsvp_counts_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- An event deleted with its RSVPs has lost its counter row too: nothing to update.
    UPDATE rsvp_counts c SET going = c.going - d.going, maybe = c.maybe - d.maybe,
        not_going = c.not_going - d.not_going, waitlist = c.waitlist - d.waitlist,
        total_attendees = c.total_attendees - d.total_attendees
    FROM (SELECT event_id,
                 count(*) FILTER (WHERE status = 'going') AS going,
                 count(*) FILTER (WHERE status = 'maybe') AS maybe,
                 count(*) FILTER (WHERE status = 'not_going') AS not_going,
                 count(*) FILTER (WHERE status = 'waitlist') AS waitlist,
                 coalesce(sum(num_guests) FILTER (WHERE status = 'going'), 0)
                     AS total_attendees
          FROM removed GROUP BY event_id) d
    WHERE c.event_id = d.event_id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION rsvp_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rsvp_counts AS c (event_id, going, maybe, not_going, waitlist, total_attendees)
    SELECT event_id, sum(d * (status = 'going')::int), sum(d * (status = 'maybe')::int),
           sum(d * (status = 'not_going')::int), sum(d * (status = 'waitlist')::int),
           sum(d * num_guests * (status = 'going')::int)
    FROM (SELECT event_id, status, num_guests, 1 AS d FROM added
          UNION ALL SELECT event_id, status, num_guests, -1 FROM removed) t
    GROUP BY event_id ORDER BY event_id
    ON CONFLICT (event_id) DO UPDATE SET going = c.going + excluded.going,
        maybe = c.maybe + excluded.maybe, not_going = c.not_going + excluded.not_going,
        waitlist = c.waitlist + excluded.waitlist,
        total_attendees = c.total_attendees + excluded.total_attendees;
    RETURN NULL;
END $$;
