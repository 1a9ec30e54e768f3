-- Read-your-writes across processes (db/replicas.py): where in the WAL each user's
-- last write ended, so that a read replica is used for that user only once it has
-- replayed that far. Written only when read replicas are configured.
CREATE TABLE write_positions (
    user_id text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    lsn pg_lsn NOT NULL
);
