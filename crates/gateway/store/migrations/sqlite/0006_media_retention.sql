-- Garbage collection of checkpoint blobs.
--
-- checkpoint_blobs lists every media blob the Gateway stored (or was about to store) for a
-- checkpoint; a row is written before its blob, so a crash after the blob is written never
-- leaves a blob nobody knows of. Only these blobs are ever collected, and only when no retained
-- checkpoint, turn attachment, reply artifact or upload pin refers to them.
CREATE TABLE checkpoint_blobs (
    media_id TEXT PRIMARY KEY NOT NULL,
    size_bytes INTEGER NOT NULL,
    registered_at_ms INTEGER NOT NULL
) STRICT;

-- Media the operator uploaded: never collected, even when a checkpoint stored the same bytes.
CREATE TABLE media_pins (
    media_id TEXT PRIMARY KEY NOT NULL,
    reason TEXT NOT NULL,
    pinned_at_ms INTEGER NOT NULL
) STRICT;

CREATE INDEX checkpoints_by_session ON checkpoints (session_key, created_at_ms);

-- Checkpoints stored before this migration become collectable, and uploads made before it
-- (each one audited as media.upload) stay pinned.
INSERT OR IGNORE INTO checkpoint_blobs (media_id, size_bytes, registered_at_ms)
SELECT json_extract(entry.value, '$.mediaId'),
       coalesce(json_extract(entry.value, '$.size'), 0),
       checkpoints.created_at_ms
FROM checkpoints, json_each(checkpoints.manifest_json, '$.entries') AS entry
WHERE json_extract(entry.value, '$.mediaId') IS NOT NULL;

INSERT OR IGNORE INTO media_pins (media_id, reason, pinned_at_ms)
SELECT json_extract(details_json, '$.mediaId'), 'upload', at_ms
FROM audit_events
WHERE action = 'media.upload' AND json_extract(details_json, '$.mediaId') IS NOT NULL;
