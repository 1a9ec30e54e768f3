-- Kalends as the OAuth 2.1 authorization server of /mcp (docs/mcp.md, "MCP clients and OAuth").

-- The consent page's CSRF tokens are MACs under this secret (gen_random_uuid
-- draws from a strong random source; two of them make 244 random bits).
INSERT INTO instance_secrets (name, value)
VALUES ('oauth_csrf', decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
                             'hex'));

-- Access tokens are JWTs signed with one active key; retired keys stay
-- published (JWKS) until every token they signed has expired.
CREATE TABLE oauth_signing_keys (
    kid text PRIMARY KEY,
    -- PKCS#8 PEM, encrypted with the service key (kalends/connected/vault.py).
    private_key bytea NOT NULL,
    public_jwk jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz
);
CREATE UNIQUE INDEX oauth_signing_keys_one_active ON oauth_signing_keys ((true))
    WHERE retired_at IS NULL;

-- Clients registered with Dynamic Client Registration (RFC 7591). Clients that
-- identify themselves with a Client ID Metadata Document are not stored.
CREATE TABLE oauth_clients (
    client_id text PRIMARY KEY CHECK (client_id ~ '^kcl_[0-9a-f]{32}$'),
    secret_hash bytea,
    metadata jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per consent: its authorization code, then the family of refresh
-- tokens rotated from it. Revoking the grant ends them all, and the access
-- tokens that name it.
CREATE TABLE oauth_grants (
    id text PRIMARY KEY CHECK (id ~ '^ogr_[0-9a-f]{32}$'),
    client_id text NOT NULL,
    consumer_name text NOT NULL REFERENCES consumers (name) ON DELETE CASCADE,
    scope text NOT NULL,
    resource text NOT NULL,
    redirect_uri text NOT NULL,
    code_hash bytea NOT NULL UNIQUE,
    code_challenge text NOT NULL,
    code_expires_at timestamptz NOT NULL,
    redeemed_at timestamptz,
    revoked_at timestamptz,
    revoked_reason text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX oauth_grants_consumer ON oauth_grants (consumer_name);

CREATE TABLE oauth_refresh_tokens (
    token_hash bytea PRIMARY KEY,
    grant_id text NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
    scope text NOT NULL,
    expires_at timestamptz NOT NULL,
    -- Set when the token is exchanged: presenting it again is reuse.
    used_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX oauth_refresh_tokens_grant ON oauth_refresh_tokens (grant_id);
