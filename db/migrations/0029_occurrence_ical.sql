-- What the iCalendar writers record about single occurrences of recurring events.

-- Attendee e-mail (iMIP) about one occurrence of a recurring event, already sent: one
-- row per occurrence (its slot, as in event_occurrences), SEQUENCE, method and address,
-- so that a job that runs again writes to nobody twice for one change of one
-- occurrence (docs/api-choices.md, "ICS feeds and attendee e-mail"). Beside
-- attendee_mail_sent (migration 0011), which is about the whole event: an occurrence's
-- SEQUENCE counts apart from the event's, so the two must not share a key.
-- `fingerprint` is what the message said (method and VEVENT): a job that finds the
-- occurrence as the last message left it sends that message's SEQUENCE again (to the
-- addresses it missed), any other state a higher one.
CREATE TABLE attendee_mail_sent_occurrences (
    event_id text NOT NULL,
    slot text NOT NULL,
    sequence integer NOT NULL,
    method text NOT NULL CHECK (method IN ('REQUEST', 'CANCEL')),
    address text NOT NULL,
    fingerprint text NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, slot, sequence, method, address)
);

-- The overrides (RECURRENCE-ID, by slot) written with each copy pushed to a connected
-- calendar (docs/api-choices.md, "Connected calendars"): a provider that keeps an
-- instance apart from its series (Google) keeps it changed after its override is gone,
-- so the next write puts the instance back as the rule makes it.
CREATE TABLE external_push_overrides (
    calendar_id text NOT NULL,
    event_id text NOT NULL,
    slot text NOT NULL,
    PRIMARY KEY (calendar_id, event_id, slot),
    FOREIGN KEY (calendar_id, event_id) REFERENCES external_pushes (calendar_id, event_id)
        ON DELETE CASCADE
);
