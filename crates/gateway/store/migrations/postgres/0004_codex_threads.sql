-- The Codex thread each session is bound to. The thread's history lives on the Harness (Codex
-- rollouts); the Gateway keeps only the binding, so it can resume the thread after a restart.
CREATE TABLE codex_threads (
    session_key TEXT PRIMARY KEY NOT NULL REFERENCES sessions (session_key),
    thread_id TEXT NOT NULL,
    bound_at_ms BIGINT NOT NULL
);
