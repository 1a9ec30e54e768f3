-- Personal calendar events, subscriptions and their synced copies, and the
-- connected external calendars that subscriptions may target.

-- Connected provider calendars. Connecting them arrives with the external
-- calendars issue; subscriptions already accept their xcal_ IDs as targets.
CREATE TABLE external_calendars (
    id text PRIMARY KEY CHECK (id ~ '^xcal_[0-9a-f]{32}$'),
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider text NOT NULL CHECK (provider IN ('google', 'microsoft', 'ios')),
    name text NOT NULL,
    description text,
    color text,
    can_edit boolean,
    time_zone text,
    is_primary boolean,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX external_calendars_user ON external_calendars (user_id, created_at, id);

CREATE TABLE subscriptions (
    id text PRIMARY KEY CHECK (id ~ '^sub_[0-9a-f]{32}$'),
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    subscription_type text NOT NULL CHECK (subscription_type IN ('profile', 'series')),
    -- The source. Profiles are only soft-deleted; a series may be deleted, and
    -- its subscriptions then stay, with access_valid false, until unsubscribed.
    profile_id text REFERENCES profiles (id),
    series_id text,
    is_active boolean NOT NULL DEFAULT true,
    include_personal_calendar boolean NOT NULL DEFAULT true,
    external_calendar_ids text[] NOT NULL DEFAULT '{}',
    -- Set by DELETE; the cleanup job removes the synced copies, then the row.
    cleanup_requested_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((subscription_type = 'profile') = (profile_id IS NOT NULL)),
    CHECK ((subscription_type = 'series') = (series_id IS NOT NULL))
);
-- One subscription per source and user: subscribing again reactivates it.
CREATE UNIQUE INDEX subscriptions_source
    ON subscriptions (user_id, subscription_type, (coalesce(profile_id, series_id)));
CREATE INDEX subscriptions_user ON subscriptions (user_id, created_at, id);
CREATE INDEX subscriptions_profile ON subscriptions (profile_id) WHERE profile_id IS NOT NULL;
CREATE INDEX subscriptions_series ON subscriptions (series_id) WHERE series_id IS NOT NULL;

CREATE TABLE calendar_events (
    id text PRIMARY KEY CHECK (id ~ '^cev_[0-9a-f]{32}$'),
    calendar_id text NOT NULL REFERENCES calendars (id) ON DELETE CASCADE,
    title text NOT NULL,
    description text,
    location text,
    -- The same time model as events (see 0002).
    start_time timestamptz NOT NULL,
    end_time timestamptz,
    start_timezone text NOT NULL,
    end_timezone text,
    is_all_day boolean NOT NULL DEFAULT false,
    start_date date,
    end_date date,
    recurrence_rule text CHECK (length(recurrence_rule) <= 8192),
    status text NOT NULL DEFAULT 'confirmed' CHECK (status IN ('confirmed', 'cancelled')),
    transparency text NOT NULL DEFAULT 'opaque' CHECK (transparency IN ('opaque', 'transparent')),
    -- A subscription-synced copy of a profile event: read-only, kept in step by
    -- the sync jobs, at most one per source event in a calendar. No foreign key
    -- to the event: when the event is deleted, the sync job removes the copy.
    source_event_id text,
    source_profile_id text,
    subscription_id text REFERENCES subscriptions (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((source_event_id IS NULL) = (source_profile_id IS NULL)),
    CHECK (end_time IS NULL OR end_time > start_time),
    CHECK (
        (is_all_day AND start_date IS NOT NULL AND end_date > start_date)
        OR (NOT is_all_day AND start_date IS NULL AND end_date IS NULL)
    )
);
CREATE UNIQUE INDEX calendar_events_copy
    ON calendar_events (calendar_id, source_event_id) WHERE source_event_id IS NOT NULL;
CREATE INDEX calendar_events_source ON calendar_events (source_event_id)
    WHERE source_event_id IS NOT NULL;
CREATE INDEX calendar_events_calendar ON calendar_events (calendar_id, created_at, id);
-- The agenda: one-off items by start within a calendar, recurring ones apart.
CREATE INDEX calendar_events_start ON calendar_events (calendar_id, start_time)
    WHERE recurrence_rule IS NULL;
CREATE INDEX calendar_events_recurring ON calendar_events (calendar_id)
    WHERE recurrence_rule IS NOT NULL;
