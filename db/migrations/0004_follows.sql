-- Follows: a user's lightweight relationship to a profile, a series or an event.

CREATE TABLE follows (
    id text PRIMARY KEY CHECK (id ~ '^fol_[0-9a-f]{32}$'),
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    following_type text NOT NULL CHECK (following_type IN ('profile', 'series', 'event')),
    -- No foreign key: events and series are deleted outright, and a follow of
    -- one outlives it (listed with target_id null) until its user removes it.
    target_id text NOT NULL CHECK (
        target_id ~ ('^' || CASE following_type WHEN 'profile' THEN 'prf'
                                                WHEN 'series' THEN 'ser'
                                                ELSE 'evt' END || '_[0-9a-f]{32}$')
    ),
    created_at timestamptz NOT NULL DEFAULT now()
);
-- One follow per user and target: following again returns the existing one,
-- and concurrent identical follows meet here (INSERT ... ON CONFLICT).
CREATE UNIQUE INDEX follows_target_per_user ON follows (user_id, following_type, target_id);
CREATE INDEX follows_user ON follows (user_id, created_at, id);
CREATE INDEX follows_profile_followers ON follows (target_id, created_at, id)
    WHERE following_type = 'profile';
