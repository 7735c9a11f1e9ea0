-- The tokens a completed turn's model calls used, as the model reported them; NULL when it
-- reported none (and for every turn stored before this migration).
ALTER TABLE turns ADD COLUMN input_tokens BIGINT;
ALTER TABLE turns ADD COLUMN output_tokens BIGINT;
ALTER TABLE turns ADD COLUMN total_tokens BIGINT;
