-- Gateway replicas on one database.
--
-- Each replica holds a lease (`replicas`): an expiry it renews while it lives, and an epoch that
-- grows every time the lease is taken afresh. A turn records the lease it was claimed under
-- (`turns.claim_replica`, `turns.claim_epoch`); every write of that turn checks, in its own
-- transaction, that this lease is still the replica's and has not expired, so a replica that
-- stalled past its lease commits nothing more for its turns. Lease times are the database
-- server's clock, never a replica's.
CREATE TABLE replicas (
    replica_id TEXT PRIMARY KEY NOT NULL,
    epoch BIGINT NOT NULL,
    url TEXT,
    acquired_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

ALTER TABLE turns ADD COLUMN claim_replica TEXT;
ALTER TABLE turns ADD COLUMN claim_epoch BIGINT;

-- Which replica holds each node's link now (replica_id NULL once it ended), what the node
-- serves and its last reported worker slots: how any replica finds where a session's turns run.
CREATE TABLE node_links (
    device_id TEXT PRIMARY KEY NOT NULL,
    replica_id TEXT,
    epoch BIGINT,
    conn_id BIGINT NOT NULL,
    runtime TEXT NOT NULL,
    commands_json JSONB NOT NULL,
    slots_in_use BIGINT NOT NULL,
    capacity BIGINT NOT NULL,
    linked_at_ms BIGINT NOT NULL,
    unlinked_at_ms BIGINT
);

-- Secrets every replica must share (the operator token, the key of replica-to-replica calls).
CREATE TABLE shared_secrets (
    name TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

-- Every durable session event is announced to every replica (LISTEN gatehouse_cluster), so
-- each one's event streams follow a session whose turns run on another replica. The payload is
-- small and bounded (a session key is at most 128 characters): the event itself is read back
-- from the table.
CREATE FUNCTION gatehouse_announce_event() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify(
        'gatehouse_cluster',
        json_build_object('k', 'event', 's', NEW.session_key, 'q', NEW.seq, 't', NEW.kind)::text
    );
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER session_events_announce AFTER INSERT ON session_events
    FOR EACH ROW EXECUTE FUNCTION gatehouse_announce_event();
