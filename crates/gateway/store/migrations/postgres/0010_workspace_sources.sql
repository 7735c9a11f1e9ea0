-- Session workspace sources (`empty`, `repository`, `worktree`).
--
-- sessions.workspace_json is the source set by PUT /v1/sessions/{key} (NULL: `empty`);
-- workspace_commit is the commit a `repository` (or a worktree's `from`) resolved to at the
-- first dispatch, pinned for the session's life; worktree_base_json is the merge base of a
-- `worktree` session: the manifest its execution workspace last held as the Gateway knows it.
ALTER TABLE sessions ADD COLUMN workspace_json JSONB;
ALTER TABLE sessions ADD COLUMN workspace_commit TEXT;
ALTER TABLE sessions ADD COLUMN worktree_base_json JSONB;

-- Every version of a `worktree` session's tree, immutable, the newest the head; its file
-- contents live in the media store.
CREATE TABLE worktree_versions (
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    version BIGINT NOT NULL,
    origin TEXT NOT NULL,
    turn_id TEXT,
    actor TEXT NOT NULL,
    manifest_json JSONB NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (session_key, version)
);

-- A worker's result for a `worktree` session, staged before its turn ends and applied to the
-- worktree afterwards, in one transaction.
CREATE TABLE worktree_results (
    turn_id TEXT PRIMARY KEY NOT NULL REFERENCES turns (turn_id),
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    staged_ref TEXT NOT NULL,
    manifest_json JSONB NOT NULL,
    state TEXT NOT NULL,
    applied_json JSONB,
    conflicts_json JSONB,
    version BIGINT,
    staged_at_ms BIGINT NOT NULL,
    applied_at_ms BIGINT
);

CREATE INDEX worktree_results_staged ON worktree_results (state, session_key, staged_at_ms);
