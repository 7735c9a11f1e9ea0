-- Immutable checkpoints of native session workspaces, content-addressed by their manifest; the
-- file contents live in the media store. `saved_order` breaks ties between checkpoints saved in
-- the same millisecond, as SQLite's rowid does.
CREATE TABLE checkpoints (
    checkpoint_id TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    manifest_json JSONB NOT NULL,
    created_at_ms BIGINT NOT NULL,
    saved_order BIGINT GENERATED ALWAYS AS IDENTITY
);

ALTER TABLE sessions ADD COLUMN latest_checkpoint_id TEXT;
