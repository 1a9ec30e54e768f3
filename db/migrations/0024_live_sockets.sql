-- GraphQL WebSocket connections and their subscriptions, per API key and per serve
-- process (graph/ws.py), so that a key's limits hold across every process
-- (docs/graphql.md, "Dashboards: `/graphql`"): one row per key a process holds sockets of, with
-- that process's counts.
--
-- A process is an `instance` (a number from live_instances). It is alive while a
-- connection of its own holds the session advisory lock (db.accounts.LIVE_LOCK,
-- instance): a process that dies, or loses its connection, loses the lock with it
-- (PostgreSQL releases a session's locks when the session ends; a pooler in session
-- mode resets them with DISCARD ALL), and from then on its rows count for nothing.
-- They are deleted when another process next starts or reconnects.
CREATE SEQUENCE live_instances AS integer CYCLE;

CREATE TABLE live_sockets (
    key_id text NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    instance integer NOT NULL,
    sockets integer NOT NULL CHECK (sockets >= 0),
    subscriptions integer NOT NULL CHECK (subscriptions >= 0),
    PRIMARY KEY (key_id, instance)
);

CREATE INDEX live_sockets_instance ON live_sockets (instance);
