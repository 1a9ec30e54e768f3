-- Webhooks (docs/api-choices.md, "Webhooks"). An endpoint belongs to a profile; its signing
-- secrets are sealed with the service's key (kalends/connected/vault.py), as
-- connected accounts' secrets are. `previous_secret` still signs until
-- `previous_secret_expires_at`, so a rotation gives receivers 24 hours.
CREATE TABLE webhook_endpoints (
    id text PRIMARY KEY,
    profile_id text NOT NULL REFERENCES profiles (id) ON DELETE CASCADE,
    url text NOT NULL,
    event_types text[] NOT NULL,
    is_active boolean NOT NULL DEFAULT true,
    disabled_reason text,
    secret bytea NOT NULL,
    previous_secret bytea,
    previous_secret_expires_at timestamptz,
    -- One delivery run per endpoint at a time, so messages go out in order; a
    -- lease, not a lock held across the network call (kalends/webhook_delivery.py).
    lease_until timestamptz,
    lease_token text,
    -- When a job is already queued to look at the endpoint again (a retry's
    -- delay, a lease's end): one such job, not one per message waiting.
    wake_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_by_profile ON webhook_endpoints (profile_id, created_at, id);

-- The outbox: written in the transaction of the change it reports. `body` is
-- the exact JSON sent and signed on every attempt.
CREATE TABLE webhook_messages (
    id text PRIMARY KEY,
    profile_id text NOT NULL,
    type text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_messages_by_age ON webhook_messages (created_at);

CREATE TABLE webhook_deliveries (
    seq bigint GENERATED ALWAYS AS IDENTITY,
    endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    message_id text NOT NULL REFERENCES webhook_messages (id) ON DELETE CASCADE,
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error text,
    delivered_at timestamptz,
    PRIMARY KEY (endpoint_id, message_id)
);
-- Each endpoint's queue, oldest first.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, seq)
    WHERE state = 'pending';
-- Pruning (delivered ones are forgotten after a while) and message lookups.
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at)
    WHERE state = 'delivered';
CREATE INDEX webhook_deliveries_by_message ON webhook_deliveries (message_id);
