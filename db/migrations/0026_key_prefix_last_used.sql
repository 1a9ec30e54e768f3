-- What `kalends admin list-keys` shows of an API key besides its ID, never its secret:
--
-- `prefix`: the key's first characters (`kal_` and six more), which tell an operator
-- which key is which without revealing it (36 of its 256 random bits). Only the hash
-- of a key is stored, so keys created before this migration have none (NULL).
--
-- `last_used_at`: when a request last authenticated with the key, written by that
-- lookup's own statement (db/accounts.py) at most once a minute per key, so that a
-- busy key costs no write per request. NULL: not used since this migration.
ALTER TABLE api_keys
    ADD COLUMN prefix text CHECK (prefix ~ '^kal_[A-Za-z0-9_-]{1,8}$'),
    ADD COLUMN last_used_at timestamptz;

-- `list-keys`: a consumer's keys, oldest first.
CREATE INDEX api_keys_consumer ON api_keys (consumer_name, created_at, id);
