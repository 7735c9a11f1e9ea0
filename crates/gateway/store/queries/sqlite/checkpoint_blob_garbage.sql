-- The checkpoint blobs nothing refers to any more: not a retained checkpoint's manifest entry,
-- not a turn's attachment, not a reply artifact event, not a worktree version or worker result,
-- not an upload pin.
WITH referenced (media_id) AS (
    SELECT json_extract(entry.value, '$.mediaId')
    FROM checkpoints, json_each(checkpoints.manifest_json, '$.entries') AS entry
    UNION
    SELECT json_extract(attachment.value, '$.mediaId')
    FROM turns, json_each(turns.attachments_json) AS attachment
    UNION
    SELECT json_extract(payload_json, '$.mediaId')
    FROM session_events
    WHERE kind = 'artifact.stored'
    UNION
    SELECT json_extract(entry.value, '$.mediaId')
    FROM worktree_versions, json_each(worktree_versions.manifest_json, '$.entries') AS entry
    UNION
    SELECT json_extract(entry.value, '$.mediaId')
    FROM worktree_results, json_each(worktree_results.manifest_json, '$.entries') AS entry
    UNION
    SELECT media_id FROM media_pins
)
SELECT media_id, size_bytes FROM checkpoint_blobs
WHERE media_id NOT IN (SELECT media_id FROM referenced WHERE media_id IS NOT NULL)
ORDER BY media_id
