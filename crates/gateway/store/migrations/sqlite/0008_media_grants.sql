-- Who may read a media blob besides the operator and keys without a session prefix: the key
-- that uploaded it (grantee `key:<secret sha256>`) and the sessions that hold it as an
-- attachment or a reply artifact (grantee `session:<session key>`). Media ids are content
-- hashes shared by every uploader, so the blob alone says nothing about whose it is.
CREATE TABLE media_grants (
    media_id TEXT NOT NULL,
    grantee TEXT NOT NULL,
    granted_at_ms INTEGER NOT NULL,
    PRIMARY KEY (media_id, grantee)
) STRICT;
