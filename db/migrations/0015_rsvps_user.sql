-- Free/busy (docs/api-choices.md, "Free/busy and meeting times") reads the events people answered
-- going or maybe to by the person (db/freebusy.py), and deleting a user deletes their answers:
-- both scanned every answer, rsvps_key and rsvps_event leading with the event.
CREATE INDEX rsvps_user ON rsvps (user_id, status);
