-- Conversations: sessions, their turns, the canonical transcript and the durable event log.
CREATE TABLE sessions (
    session_key TEXT PRIMARY KEY NOT NULL,
    runtime TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    next_message_seq INTEGER NOT NULL DEFAULT 1,
    next_event_seq INTEGER NOT NULL DEFAULT 1
) STRICT;

CREATE TABLE turns (
    turn_id TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    turn_no INTEGER NOT NULL,
    status TEXT NOT NULL,
    queue_mode TEXT NOT NULL,
    idempotency_key TEXT,
    attachments_json TEXT NOT NULL,
    reply TEXT,
    error_code TEXT,
    error_message TEXT,
    created_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    ended_at_ms INTEGER,
    UNIQUE (session_key, turn_no)
) STRICT;

CREATE UNIQUE INDEX turns_idempotency ON turns (session_key, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX turns_by_status ON turns (status, session_key, turn_no);

-- A message is inserted only when it is complete; streamed deltas are never stored.
CREATE TABLE messages (
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    seq INTEGER NOT NULL,
    turn_id TEXT NOT NULL REFERENCES turns (turn_id),
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    tool_name TEXT,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (session_key, seq)
) STRICT;

CREATE TABLE session_events (
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (session_key, seq)
) STRICT;
