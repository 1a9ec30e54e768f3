-- Connected provider accounts (CalDAV/iCloud, Google, Microsoft), their calendars'
-- sync state, the events synced from them, and the copies pushed to them.

CREATE TABLE external_accounts (
    id text PRIMARY KEY CHECK (id ~ '^xac_[0-9a-f]{32}$'),
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider text NOT NULL CHECK (provider IN ('google', 'microsoft', 'ios')),
    url text,
    username text,
    -- The app-specific password or OAuth refresh token, encrypted with a key
    -- that is not in the database (kalends/connected/vault.py).
    secret bytea NOT NULL,
    -- ok; failed (the last attempt failed, retried with back-off); disabled
    -- (credentials refused: nothing runs until the account is connected again).
    status text NOT NULL DEFAULT 'ok' CHECK (status IN ('ok', 'failed', 'disabled')),
    last_error text,
    failures integer NOT NULL DEFAULT 0,
    last_attempt_at timestamptz,
    last_success_at timestamptz,
    next_sync_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX external_accounts_user ON external_accounts (user_id);
CREATE INDEX external_accounts_due ON external_accounts (next_sync_at) WHERE status <> 'disabled';

-- Calendars could not be connected before this migration; a row without an
-- account could only have been written by hand and has nothing to sync from.
DELETE FROM external_calendars;
ALTER TABLE external_calendars
    ADD COLUMN account_id text NOT NULL REFERENCES external_accounts (id) ON DELETE CASCADE,
    ADD COLUMN remote_id text NOT NULL,
    ADD COLUMN selected boolean NOT NULL DEFAULT true,
    ADD COLUMN sync_token text,
    -- The last sync of this calendar that completed; null until the first full one.
    ADD COLUMN last_success_at timestamptz,
    ADD CONSTRAINT external_calendars_remote UNIQUE (account_id, remote_id);

CREATE TABLE external_events (
    id text PRIMARY KEY CHECK (id ~ '^xcev_[0-9a-f]{32}$'),
    calendar_id text NOT NULL REFERENCES external_calendars (id) ON DELETE CASCADE,
    -- The provider resource (CalDAV href, Google or Graph event id) and the
    -- component within it: '' for a master, else its RECURRENCE-ID.
    remote_key text NOT NULL,
    recurrence_key text NOT NULL DEFAULT '',
    etag text,
    uid text NOT NULL,
    title text NOT NULL,
    description text,
    location text,
    cancelled boolean NOT NULL DEFAULT false,
    transparent boolean NOT NULL DEFAULT false,
    -- Start, end, zones, RRULE, RDATE, EXDATE and RECURRENCE-ID as the provider
    -- states them (kalends/connected/components.py); the agenda expands them.
    times jsonb NOT NULL,
    -- Every occurrence lies within [span_start, span_end) (span_end null: the
    -- recurrence has no end), widened for floating times; the agenda's index.
    span_start timestamptz NOT NULL,
    span_end timestamptz,
    UNIQUE (calendar_id, remote_key, recurrence_key)
);
CREATE INDEX external_events_window ON external_events (calendar_id, span_start);
CREATE INDEX external_events_uid ON external_events (calendar_id, uid);

-- Copies of Kalends events pushed to a connected calendar by subscriptions.
CREATE TABLE external_pushes (
    calendar_id text NOT NULL REFERENCES external_calendars (id) ON DELETE CASCADE,
    event_id text NOT NULL,
    remote_key text NOT NULL,
    etag text,
    -- What was written, so that an unchanged event is not written again.
    digest text NOT NULL,
    pushed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (calendar_id, event_id),
    UNIQUE (calendar_id, remote_key)
);

-- Connecting the same account again replaces its secret and re-enables it
-- instead of adding a second copy of its calendars.
CREATE UNIQUE INDEX external_accounts_identity ON external_accounts
    (user_id, provider, coalesce(url, ''), coalesce(username, ''));
