-- What each deleted event was, for GraphQL subscribers (docs/graphql.md, "Dashboards:
-- `/graphql`"): they learn of a change after it commits and then read the event, which a delete
-- has removed. The delete's transaction keeps the row here (db/changes.py); readers come within
-- moments, and rows older than an hour go with the next delete.
-- UNLOGGED: a crash also breaks every subscriber's feed, which then ends its
-- subscriptions, so nothing would read what the crash took.
CREATE UNLOGGED TABLE deleted_events (
    event_id text PRIMARY KEY,
    snapshot jsonb NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deleted_events_deleted_at ON deleted_events (deleted_at);
