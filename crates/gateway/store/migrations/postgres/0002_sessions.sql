-- Conversations: sessions, their turns, the canonical transcript and the durable event log.
-- The session row is the lock of its transcript and event log: every append first bumps its
-- counter there, so concurrent appends to one session get contiguous sequence numbers.
CREATE TABLE sessions (
    session_key TEXT PRIMARY KEY NOT NULL,
    runtime TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    next_message_seq BIGINT NOT NULL DEFAULT 1,
    next_event_seq BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE turns (
    turn_id TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    turn_no BIGINT NOT NULL,
    status TEXT NOT NULL,
    queue_mode TEXT NOT NULL,
    idempotency_key TEXT,
    attachments_json JSONB NOT NULL,
    reply TEXT,
    error_code TEXT,
    error_message TEXT,
    created_at_ms BIGINT NOT NULL,
    started_at_ms BIGINT,
    ended_at_ms BIGINT,
    UNIQUE (session_key, turn_no)
);

CREATE UNIQUE INDEX turns_idempotency ON turns (session_key, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX turns_by_status ON turns (status, session_key, turn_no);

-- A message is inserted only when it is complete; streamed deltas are never stored.
CREATE TABLE messages (
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    seq BIGINT NOT NULL,
    turn_id TEXT NOT NULL REFERENCES turns (turn_id),
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    tool_name TEXT,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (session_key, seq)
);

CREATE INDEX messages_by_turn ON messages (turn_id, seq);

CREATE TABLE session_events (
    session_key TEXT NOT NULL REFERENCES sessions (session_key),
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    payload_json JSONB NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (session_key, seq)
);
