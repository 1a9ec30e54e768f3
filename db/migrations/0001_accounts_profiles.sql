CREATE EXTENSION IF NOT EXISTS citext;

-- Secrets this deployment signs with (cursor MACs); made once, shared by all processes.
CREATE TABLE instance_secrets (
    name text PRIMARY KEY,
    value bytea NOT NULL
);
INSERT INTO instance_secrets (name, value)
VALUES ('cursor', decode(md5(random()::text || clock_timestamp()::text) || md5(random()::text), 'hex'));

CREATE TABLE users (
    id text PRIMARY KEY CHECK (id ~ '^usr_[0-9a-f]{32}$'),
    email citext NOT NULL UNIQUE,
    display_name text,
    timezone text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE consumers (
    name text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,128}$'),
    user_id text REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX consumers_user_id ON consumers (user_id);

CREATE TABLE api_keys (
    id text PRIMARY KEY CHECK (id ~ '^key_[0-9a-f]{32}$'),
    consumer_name text NOT NULL REFERENCES consumers (name) ON DELETE CASCADE,
    key_hash bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

CREATE TABLE organizations (
    id text PRIMARY KEY CHECK (id ~ '^org_[0-9a-f]{32}$'),
    name text NOT NULL,
    handle citext UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE organization_members (
    organization_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    -- The user's single owned default organization (docs/http.md, "Authentication and accounts").
    is_default boolean NOT NULL DEFAULT false CHECK (NOT is_default OR role = 'owner'),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, user_id)
);
CREATE UNIQUE INDEX organization_members_one_default ON organization_members (user_id) WHERE is_default;
CREATE INDEX organization_members_user ON organization_members (user_id, created_at, organization_id);

CREATE TABLE calendars (
    id text PRIMARY KEY CHECK (id ~ '^cal_[0-9a-f]{32}$'),
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name text NOT NULL,
    description text,
    color text,
    is_default boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX calendars_one_default ON calendars (user_id) WHERE is_default;
CREATE INDEX calendars_user ON calendars (user_id, created_at, id);

CREATE TABLE profiles (
    id text PRIMARY KEY CHECK (id ~ '^prf_[0-9a-f]{32}$'),
    organization_id text NOT NULL REFERENCES organizations (id),
    owner_user_id text NOT NULL REFERENCES users (id),
    platform_id citext NOT NULL CHECK (platform_id ~ '^[A-Za-z0-9_.-]{3,64}$'),
    display_name text NOT NULL,
    description text,
    profile_image_url text,
    header_image_url text,
    is_private boolean NOT NULL DEFAULT false,
    default_event_duration_minutes integer,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);
-- A handle is unique among live profiles; a deleted profile frees it.
CREATE UNIQUE INDEX profiles_platform_id_live ON profiles (platform_id) WHERE deleted_at IS NULL;
CREATE INDEX profiles_owner ON profiles (owner_user_id, created_at, id) WHERE deleted_at IS NULL;
CREATE INDEX profiles_organization ON profiles (organization_id, created_at, id) WHERE deleted_at IS NULL;
