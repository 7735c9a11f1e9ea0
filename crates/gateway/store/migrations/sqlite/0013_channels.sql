-- Channels: messages received from chat platforms and signed webhooks, and the replies
-- delivered to them.
--
-- Every inbound message a channel judged, by the platform's own message id: a message seen
-- again (redelivered, re-synced, or sent twice by the platform) finds its row and admits
-- nothing. `outcome` is `admitted` (with the turn it joined), `pairing`, `denied` or
-- `ignored`.
CREATE TABLE channel_inbound (
    channel TEXT NOT NULL,
    message_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    turn_id TEXT,
    received_at_ms INTEGER NOT NULL,
    PRIMARY KEY (channel, message_id)
) STRICT;

-- Where the reply of a channel-origin turn goes: the conversation and sender of the latest
-- message the turn took.
CREATE TABLE channel_turns (
    turn_id TEXT PRIMARY KEY NOT NULL,
    channel TEXT NOT NULL,
    message_id TEXT NOT NULL,
    conversation TEXT NOT NULL,
    sender TEXT NOT NULL
) STRICT;

-- Pending pairing requests: one per sender, at most a few per channel, each until it expires or
-- an operator approves or denies it.
CREATE TABLE channel_pairings (
    channel TEXT NOT NULL,
    code TEXT NOT NULL,
    sender TEXT NOT NULL,
    conversation TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (channel, code)
) STRICT;

CREATE UNIQUE INDEX channel_pairings_by_sender ON channel_pairings (channel, sender);

-- Senders an operator approved by pairing, beside the channel's configured allow list.
CREATE TABLE channel_senders (
    channel TEXT NOT NULL,
    sender TEXT NOT NULL,
    approved_at_ms INTEGER NOT NULL,
    PRIMARY KEY (channel, sender)
) STRICT;

-- The outbox: every reply to deliver, written in the transaction that ends its turn (or that
-- creates a pairing). `text` is absent for a turn's reply, which is read from the turn when it
-- is sent. A deliverer claims a row until `claimed_until_ms`; `state` is `pending`,
-- `delivered` or `failed`.
CREATE TABLE channel_outbox (
    delivery_id TEXT PRIMARY KEY NOT NULL,
    channel TEXT NOT NULL,
    turn_id TEXT,
    in_reply_to TEXT,
    conversation TEXT NOT NULL,
    recipient TEXT NOT NULL,
    text TEXT,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL,
    claimed_by TEXT,
    claimed_until_ms INTEGER,
    last_error TEXT,
    created_at_ms INTEGER NOT NULL,
    ended_at_ms INTEGER
) STRICT;

CREATE INDEX channel_outbox_due ON channel_outbox (channel, state, next_attempt_at_ms);

-- A polling channel's place: the platform's cursor (Matrix's `next_batch`), written after
-- what it covers was judged, so a restart resumes without skipping or answering twice; and the
-- replica whose sync loop holds the channel until `held_until_ms`, so one loop runs at a time.
CREATE TABLE channel_state (
    channel TEXT PRIMARY KEY NOT NULL,
    cursor TEXT,
    holder TEXT NOT NULL,
    held_until_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;

-- The channel a session's messages come from, with the raw platform ids it is keyed by: the
-- peer of a direct session, the room (group, chat) of a group session.
CREATE TABLE channel_sessions (
    session_key TEXT PRIMARY KEY NOT NULL,
    channel TEXT NOT NULL,
    peer TEXT,
    room TEXT
) STRICT;

-- What the hourly prune and `GET /v1/channels` read by time.
CREATE INDEX channel_inbound_by_time ON channel_inbound (channel, received_at_ms);
CREATE INDEX channel_outbox_ended ON channel_outbox (channel, state, ended_at_ms);

-- The direct chats a channel accepted, with the peer who opened each: a two-member room is
-- a direct chat with that peer only, so nobody can move someone's direct session into a room
-- they arranged.
CREATE TABLE channel_rooms (
    channel TEXT NOT NULL,
    room TEXT NOT NULL,
    peer TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (channel, room)
) STRICT;
