-- Attendee e-mail (iMIP) already sent: one row per event revision, method and
-- address, so a send job that runs again (a worker lost mid-way, a retry) does
-- not write to anyone twice for the same change.
CREATE TABLE attendee_mail_sent (
    event_id text NOT NULL,
    sequence integer NOT NULL,
    method text NOT NULL CHECK (method IN ('REQUEST', 'CANCEL')),
    address text NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, sequence, method, address)
);
