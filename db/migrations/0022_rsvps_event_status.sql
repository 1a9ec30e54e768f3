-- An RSVP summary (db/events.py: summary_one_off) counts the RSVPs of thousands of
-- events by status: with (event_id, status) the count is read from the index
-- alone instead of every RSVP row.
CREATE INDEX rsvps_event_status ON rsvps (event_id, status);
