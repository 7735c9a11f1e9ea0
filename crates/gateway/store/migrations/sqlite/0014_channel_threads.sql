-- Channels: threads and streamed replies.
--
-- The thread a channel message was written in (Matrix: the thread's root event), so its turn's
-- reply goes into that thread; and, for a channel that streams replies by editing one message,
-- the platform's id of that message once it was sent, so the final reply replaces it rather
-- than posting a second message.
ALTER TABLE channel_turns ADD COLUMN thread TEXT;
ALTER TABLE channel_turns ADD COLUMN stream_message TEXT;
ALTER TABLE channel_outbox ADD COLUMN thread TEXT;

-- How many times a deliverer claimed each outbox entry: an entry claimed before may have been
-- sent in part by a deliverer that died, so its next attempt looks for what was sent.
ALTER TABLE channel_outbox ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;

-- The reply artifacts of each turn, as the `artifact.stored` events record them, by turn: a
-- channel sends them back with the turn's reply.
CREATE TABLE turn_artifacts (
    turn_id TEXT NOT NULL,
    path TEXT NOT NULL,
    media_id TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (turn_id, path)
) STRICT;

-- What a sender's share of turns is counted by.
CREATE INDEX channel_turns_by_sender ON channel_turns (channel, sender);
