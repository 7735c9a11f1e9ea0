-- Garbage collection of checkpoint blobs.
--
-- checkpoint_blobs lists every media blob the Gateway stored (or was about to store) for a
-- checkpoint; a row is written before its blob, so a crash after the blob is written never
-- leaves a blob nobody knows of. Only these blobs are ever collected, and only when no retained
-- checkpoint, turn attachment, reply artifact or upload pin refers to them.
CREATE TABLE checkpoint_blobs (
    media_id TEXT PRIMARY KEY NOT NULL,
    size_bytes BIGINT NOT NULL,
    registered_at_ms BIGINT NOT NULL
);

-- Media the operator uploaded: never collected, even when a checkpoint stored the same bytes.
CREATE TABLE media_pins (
    media_id TEXT PRIMARY KEY NOT NULL,
    reason TEXT NOT NULL,
    pinned_at_ms BIGINT NOT NULL
);

CREATE INDEX checkpoints_by_session ON checkpoints (session_key, created_at_ms);
