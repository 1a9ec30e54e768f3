-- Rate-limit buckets (GCRA), one row per subject: "consumer:<name>" or "address:<ip>".
-- `tat` is the bucket's theoretical arrival time; a row whose tat has passed
-- behaves exactly like no row, so such rows may be deleted at any time.
-- UNLOGGED: a counter is not worth a WAL write per request, and a crash that
-- empties the table only forgives the requests of the last window.
CREATE UNLOGGED TABLE rate_limits (
    subject text PRIMARY KEY,
    tat timestamptz NOT NULL,
    allowed boolean NOT NULL
) WITH (fillfactor = 70);
