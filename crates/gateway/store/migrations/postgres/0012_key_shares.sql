-- Fair shares between API keys.
--
-- A key's own shares: open event streams and long polls, and media bytes. NULL is the
-- Gateway's default share.
ALTER TABLE api_keys ADD COLUMN max_streams BIGINT;
ALTER TABLE api_keys ADD COLUMN media_quota_bytes BIGINT;

-- Who created each session (`key:<secret sha256>` or `operator`): the checkpoints and
-- worktree versions of a session count against its creator's media share. Written once, by the
-- first request that names the session; never changed.
CREATE TABLE session_owners (
    session_key TEXT PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

-- The media bytes charged to each owner: its uploads (kind `upload`) and the blobs stored for
-- the sessions it created (kind `session`). A blob counts once per owner and kind; a session
-- charge goes when garbage collection deletes the blob, an upload charge when its owner
-- deletes the upload.
CREATE TABLE media_charges (
    owner TEXT NOT NULL,
    media_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    size_bytes BIGINT NOT NULL,
    charged_at_ms BIGINT NOT NULL,
    PRIMARY KEY (owner, media_id, kind)
);

CREATE INDEX media_charges_by_media ON media_charges (media_id);

-- Uploads made before shares existed stay pinned whoever deletes the same bytes later: they
-- are charged to no key, with their size unknown here.
INSERT INTO media_charges (owner, media_id, kind, size_bytes, charged_at_ms)
SELECT 'legacy', media_id, 'upload', 0, pinned_at_ms FROM media_pins;
