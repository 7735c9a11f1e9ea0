-- The checkpoint blobs nothing refers to any more: not a retained checkpoint's manifest entry,
-- not a turn's attachment, not a reply artifact event, not a worktree version or worker result,
-- not an upload pin. A value that is not
-- an array (where SQLite's json_each yields nothing) contributes nothing.
WITH referenced (media_id) AS (
    SELECT entry.value ->> 'mediaId'
    FROM checkpoints,
         jsonb_array_elements(CASE jsonb_typeof(manifest_json -> 'entries')
             WHEN 'array' THEN manifest_json -> 'entries' ELSE '[]'::jsonb END) AS entry
    UNION
    SELECT attachment.value ->> 'mediaId'
    FROM turns,
         jsonb_array_elements(CASE jsonb_typeof(attachments_json)
             WHEN 'array' THEN attachments_json ELSE '[]'::jsonb END) AS attachment
    UNION
    SELECT payload_json ->> 'mediaId'
    FROM session_events
    WHERE kind = 'artifact.stored'
    UNION
    SELECT entry.value ->> 'mediaId'
    FROM worktree_versions,
         jsonb_array_elements(CASE jsonb_typeof(manifest_json -> 'entries')
             WHEN 'array' THEN manifest_json -> 'entries' ELSE '[]'::jsonb END) AS entry
    UNION
    SELECT entry.value ->> 'mediaId'
    FROM worktree_results,
         jsonb_array_elements(CASE jsonb_typeof(manifest_json -> 'entries')
             WHEN 'array' THEN manifest_json -> 'entries' ELSE '[]'::jsonb END) AS entry
    UNION
    SELECT media_id FROM media_pins
)
SELECT media_id, size_bytes FROM checkpoint_blobs
WHERE media_id NOT IN (SELECT media_id FROM referenced WHERE media_id IS NOT NULL)
ORDER BY media_id COLLATE "C"
