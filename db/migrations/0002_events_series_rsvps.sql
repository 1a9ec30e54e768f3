-- Events, their RSVP settings, RSVPs, series and series membership.

CREATE TABLE events (
    id text PRIMARY KEY CHECK (id ~ '^evt_[0-9a-f]{32}$'),
    profile_id text NOT NULL REFERENCES profiles (id),
    title text NOT NULL,
    description text,
    location text,
    -- Timed events: UTC instants, the zones kept for display and recurrence.
    -- All-day events: start_date/end_date (exclusive) are authoritative and the
    -- instants are local midnights in start_timezone.
    start_time timestamptz NOT NULL,
    end_time timestamptz,
    start_timezone text NOT NULL,
    end_timezone text,
    is_all_day boolean NOT NULL DEFAULT false,
    start_date date,
    end_date date,
    recurrence_rule text CHECK (length(recurrence_rule) <= 8192),
    status text NOT NULL DEFAULT 'scheduled' CHECK (status IN ('scheduled', 'cancelled')),
    slug citext NOT NULL,
    image_url text,
    is_private boolean NOT NULL DEFAULT false,
    require_rsvp boolean NOT NULL DEFAULT false,
    require_payment boolean NOT NULL DEFAULT false,
    cancellation_reason text,
    cancelled_at timestamptz,
    is_rescheduled boolean NOT NULL DEFAULT false,
    transparency text NOT NULL DEFAULT 'opaque' CHECK (transparency IN ('opaque', 'transparent')),
    -- RSVP settings have no identity of their own: they live on the event row,
    -- which is also the row an RSVP write locks to keep capacity exact.
    enable_capacity_limit boolean NOT NULL DEFAULT false,
    capacity_limit integer CHECK (capacity_limit >= 0),
    allow_waitlist boolean NOT NULL DEFAULT true,
    allow_multiple_attendees boolean NOT NULL DEFAULT true,
    allow_notifications boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (end_time IS NULL OR end_time > start_time),
    CHECK (
        (is_all_day AND start_date IS NOT NULL AND end_date > start_date)
        OR (NOT is_all_day AND start_date IS NULL AND end_date IS NULL)
    ),
    CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL)),
    CHECK (NOT enable_capacity_limit OR capacity_limit IS NOT NULL)
);
CREATE UNIQUE INDEX events_profile_slug ON events (profile_id, slug);
CREATE INDEX events_start ON events (start_time, id);
CREATE INDEX events_profile_start ON events (profile_id, start_time, id);

CREATE TABLE rsvps (
    id text PRIMARY KEY CHECK (id ~ '^rsvp_[0-9a-f]{32}$'),
    event_id text NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    attendee_email text,
    attendee_first_name text,
    attendee_last_name text,
    status text NOT NULL CHECK (status IN ('going', 'maybe', 'not_going', 'waitlist')),
    rsvp_type text,
    num_guests integer NOT NULL DEFAULT 1 CHECK (num_guests >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- The caller's RSVP is keyed by (event, caller, lower-cased attendee email or none).
CREATE UNIQUE INDEX rsvps_key ON rsvps (event_id, user_id, (coalesce(lower(attendee_email), '')));
CREATE INDEX rsvps_event ON rsvps (event_id, created_at, id);

CREATE TABLE series (
    id text PRIMARY KEY CHECK (id ~ '^ser_[0-9a-f]{32}$'),
    profile_id text NOT NULL REFERENCES profiles (id),
    name text NOT NULL,
    slug citext NOT NULL,
    description text,
    is_private boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX series_profile_slug ON series (profile_id, slug);
CREATE INDEX series_profile ON series (profile_id, created_at, id);

CREATE TABLE series_events (
    series_id text NOT NULL REFERENCES series (id) ON DELETE CASCADE,
    event_id text NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (series_id, event_id)
);
CREATE INDEX series_events_event ON series_events (event_id, series_id);
