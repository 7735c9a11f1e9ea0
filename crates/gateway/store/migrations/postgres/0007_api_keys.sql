-- API keys: a name, the SHA-256 of the secret (never the secret), its scopes as a JSON array of
-- strings, an optional session-key prefix, an optional expiry and optional rate limits. A
-- revoked key is deleted, so its name may be given to a new key; the audit trail keeps the
-- history.
CREATE TABLE api_keys (
    name TEXT PRIMARY KEY NOT NULL,
    secret_sha256 TEXT NOT NULL UNIQUE,
    scopes_json JSONB NOT NULL,
    session_prefix TEXT,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT,
    last_used_at_ms BIGINT,
    requests_per_minute BIGINT,
    concurrent_turns BIGINT
);
