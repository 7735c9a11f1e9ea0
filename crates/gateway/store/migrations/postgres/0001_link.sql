-- Enrolled Harness nodes. Device tokens are stored only as SHA-256 hashes.
CREATE TABLE nodes (
    device_id TEXT PRIMARY KEY NOT NULL,
    public_key TEXT NOT NULL,
    display_name TEXT NOT NULL,
    runtime TEXT NOT NULL,
    commands_json JSONB NOT NULL,
    workspace_root TEXT,
    device_token_sha256 TEXT NOT NULL,
    enrolled_at_ms BIGINT NOT NULL,
    last_seen_at_ms BIGINT NOT NULL
);

-- One-time enrollment codes. Only the hash of the bootstrap token is kept.
CREATE TABLE setup_codes (
    token_sha256 TEXT PRIMARY KEY NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    used_at_ms BIGINT,
    used_by_device_id TEXT
);

-- Every mutation and every denial. Never file content or secrets. Appends are serialized by a
-- transaction-level advisory lock, so the sequence numbers become visible in increasing order.
CREATE TABLE audit_events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason_code TEXT,
    details_json JSONB NOT NULL
);
