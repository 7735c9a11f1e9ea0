-- Immutable checkpoints of native session workspaces, content-addressed by their manifest; the
-- file contents live in the media store.
CREATE TABLE checkpoints (
    checkpoint_id TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    manifest_json TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;

ALTER TABLE sessions ADD COLUMN latest_checkpoint_id TEXT;
