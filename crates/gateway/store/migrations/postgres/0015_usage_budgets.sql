-- Usage accounting and budgets: each turn's cached input, model calls, retries, model name and
-- the API key that sent it (NULL for the operator token and channels), summed per call as the
-- calls answer; and a key's daily token budget.
ALTER TABLE turns ADD COLUMN cached_input_tokens BIGINT;
ALTER TABLE turns ADD COLUMN model_calls BIGINT;
ALTER TABLE turns ADD COLUMN retries BIGINT;
ALTER TABLE turns ADD COLUMN model TEXT;
ALTER TABLE turns ADD COLUMN api_key TEXT;
ALTER TABLE api_keys ADD COLUMN tokens_per_day BIGINT;

CREATE INDEX turns_by_api_key ON turns (api_key, created_at_ms);
CREATE INDEX turns_by_admission ON turns (created_at_ms);
