-- The node each session is bound to: set when its first turn is dispatched, changed only by an
-- explicit move. A session's history and checkpoints are sent only to this node.
ALTER TABLE sessions ADD COLUMN node_id TEXT;
ALTER TABLE sessions ADD COLUMN node_bound_at_ms BIGINT;
