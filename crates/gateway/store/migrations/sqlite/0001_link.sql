-- Enrolled Harness nodes. Device tokens are stored only as SHA-256 hashes.
CREATE TABLE nodes (
    device_id TEXT PRIMARY KEY NOT NULL,
    public_key TEXT NOT NULL,
    display_name TEXT NOT NULL,
    runtime TEXT NOT NULL,
    commands_json TEXT NOT NULL,
    workspace_root TEXT,
    device_token_sha256 TEXT NOT NULL,
    enrolled_at_ms INTEGER NOT NULL,
    last_seen_at_ms INTEGER NOT NULL
) STRICT;

-- One-time enrollment codes. Only the hash of the bootstrap token is kept.
CREATE TABLE setup_codes (
    token_sha256 TEXT PRIMARY KEY NOT NULL,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    used_at_ms INTEGER,
    used_by_device_id TEXT
) STRICT;

-- Every mutation and every denial. Never file content or secrets.
CREATE TABLE audit_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason_code TEXT,
    details_json TEXT NOT NULL
) STRICT;
