-- Gateway replicas: the same tables as on PostgreSQL, so both backends keep one contract. A
-- SQLite store has one replica at a time (its file is locked), whose lease is renewed as on
-- PostgreSQL and fences its turns the same way.
CREATE TABLE replicas (
    replica_id TEXT PRIMARY KEY NOT NULL,
    epoch INTEGER NOT NULL,
    url TEXT,
    acquired_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) STRICT;

ALTER TABLE turns ADD COLUMN claim_replica TEXT;
ALTER TABLE turns ADD COLUMN claim_epoch INTEGER;

CREATE TABLE node_links (
    device_id TEXT PRIMARY KEY NOT NULL,
    replica_id TEXT,
    epoch INTEGER,
    conn_id INTEGER NOT NULL,
    runtime TEXT NOT NULL,
    commands_json TEXT NOT NULL,
    slots_in_use INTEGER NOT NULL,
    capacity INTEGER NOT NULL,
    linked_at_ms INTEGER NOT NULL,
    unlinked_at_ms INTEGER
) STRICT;

CREATE TABLE shared_secrets (
    name TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;
