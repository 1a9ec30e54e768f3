-- Webhook delivery in order per resource, not per endpoint (docs/api-choices.md, "Webhooks"):
-- messages about one event (its own and its RSVPs') reach an endpoint in the
-- order of their changes; messages about different events may overtake each
-- other, so one message waiting for its retry holds back only its own event's.

-- The ordering key: the event the message is about. Queued messages get theirs
-- from the stored body (an RSVP's `event_id`, an event's `id`); a body without
-- one (none is written so) shares one key with its endpoint's others, so it
-- keeps the old per-endpoint order rather than overtaking anything.
ALTER TABLE webhook_deliveries ADD COLUMN resource_id text;
UPDATE webhook_deliveries d
SET resource_id = coalesce(
    CASE WHEN m.type LIKE 'rsvp.%' THEN m.body::jsonb -> 'data' ->> 'event_id'
         ELSE m.body::jsonb -> 'data' ->> 'id' END, '')
FROM webhook_messages m WHERE m.id = d.message_id;
ALTER TABLE webhook_deliveries ALTER COLUMN resource_id SET NOT NULL;

-- Each resource's queue at each endpoint, oldest first (seq still orders it).
DROP INDEX webhook_deliveries_pending;
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, resource_id, seq)
    WHERE state = 'pending';

-- One lane per endpoint and resource with messages pending: the head of that
-- queue, and when it may be sent. A lane is claimed by setting `lease_token`
-- and pushing `due_at` to the lease's end, so a claim reads only due lanes
-- (webhook_lanes_due) whatever the backlog, a dead sender's lane comes due
-- again by itself, and a lane waiting for a retry is simply due later. Writers
-- add a lane (ON CONFLICT DO NOTHING) under a shared advisory lock on the lane
-- that a sender must take exclusively to drop an emptied one
-- (db/webhooks.py), so no message is left without its lane.
CREATE TABLE webhook_lanes (
    endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    resource_id text NOT NULL,
    due_at timestamptz NOT NULL DEFAULT now(),
    lease_token text,
    PRIMARY KEY (endpoint_id, resource_id)
);
CREATE INDEX webhook_lanes_due ON webhook_lanes (endpoint_id, due_at);
-- Counting an endpoint's requests in flight (its bound) reads only leased lanes.
CREATE INDEX webhook_lanes_leased ON webhook_lanes (endpoint_id, due_at)
    WHERE lease_token IS NOT NULL;

INSERT INTO webhook_lanes (endpoint_id, resource_id, due_at)
SELECT DISTINCT ON (endpoint_id, resource_id) endpoint_id, resource_id, next_attempt_at
FROM webhook_deliveries WHERE state = 'pending'
ORDER BY endpoint_id, resource_id, seq;

-- The endpoint-wide lease is gone: lanes are leased one by one.
ALTER TABLE webhook_endpoints DROP COLUMN lease_until, DROP COLUMN lease_token;

-- The two steps of delivery that must see what committed while they waited, in
-- one round trip each (plpgsql: every statement in it takes a fresh snapshot,
-- and the locks it takes are held only until the caller's statement commits).

-- Lease up to `most` due lanes of an active endpoint, keeping no more than
-- `bound` leased at once: claims of one endpoint take turns on its row (NO KEY:
-- writers' foreign-key checks do not wait), and count after their turn came.
CREATE FUNCTION webhook_claim(endpoint text, token text, lease interval, bound int, most int)
RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM webhook_endpoints WHERE id = endpoint AND is_active FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT l.resource_id FROM webhook_lanes l
        WHERE l.endpoint_id = endpoint AND l.due_at <= now()
        ORDER BY l.due_at
        LIMIT greatest(0, least(most, bound - (
            SELECT count(*) FROM webhook_lanes b
            WHERE b.endpoint_id = endpoint AND b.lease_token IS NOT NULL
              AND b.due_at > now())))
        FOR UPDATE SKIP LOCKED
    )
    UPDATE webhook_lanes l SET lease_token = token, due_at = now() + lease
    FROM due WHERE l.endpoint_id = endpoint AND l.resource_id = due.resource_id
    RETURNING l.resource_id;
END $$;

-- A sender done with lane `resource` (no message left that it saw): drop the
-- lane unless a message came meanwhile, then lease the endpoint's next due
-- lane in its place (the bound's count stays as it was). Returns the lane to
-- go on with: `resource` again if it has messages, another, or NULL (nothing
-- due, or the lane no longer this sender's: its place is then another's).
-- A writer queueing into a lane holds the lane's advisory lock shared until it
-- commits (db/webhooks.py); holding it, the DELETE sees every message queued.
-- Without it, the lane is let go for `retry`, to be looked at once it committed.
CREATE FUNCTION webhook_finish(endpoint text, resource text, token text, lease interval,
                               retry interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    handed text;
BEGIN
    IF pg_try_advisory_xact_lock(
            hashtextextended('kalends:webhook-lane:' || endpoint || ' ' || resource, 0)) THEN
        DELETE FROM webhook_lanes l
        WHERE l.endpoint_id = endpoint AND l.resource_id = resource AND l.lease_token = token
          AND NOT EXISTS (SELECT FROM webhook_deliveries d
                          WHERE d.endpoint_id = endpoint AND d.resource_id = resource
                            AND d.state = 'pending');
        IF NOT FOUND THEN
            PERFORM 1 FROM webhook_lanes l
            WHERE l.endpoint_id = endpoint AND l.resource_id = resource
              AND l.lease_token = token;
            RETURN CASE WHEN FOUND THEN resource END;
        END IF;
    ELSE
        UPDATE webhook_lanes l SET lease_token = NULL, due_at = now() + retry
        WHERE l.endpoint_id = endpoint AND l.resource_id = resource AND l.lease_token = token;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    WITH due AS (
        SELECT l.resource_id FROM webhook_lanes l
        WHERE l.endpoint_id = endpoint AND l.due_at <= now()
          AND EXISTS (SELECT FROM webhook_endpoints w WHERE w.id = endpoint AND w.is_active)
        ORDER BY l.due_at LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE webhook_lanes l SET lease_token = token, due_at = now() + lease
    FROM due WHERE l.endpoint_id = endpoint AND l.resource_id = due.resource_id
    RETURNING l.resource_id INTO handed;
    RETURN handed;
END $$;
