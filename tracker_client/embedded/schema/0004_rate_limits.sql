-- Schema version 4: fleet-wide rate limits and concurrency caps per role (extension
-- `rate_limits`). One row per limited role. The rate is a token bucket of `rate_count` tokens
-- refilled over `period_ms`; `tokens` as of `refilled_at_ms` is updated by each claim in the
-- claim's own write transaction, so every worker process sees and spends the same tokens.
-- `max_running`: claims of the role are refused while that many of its tasks are leased.

CREATE TABLE rate_limits (
    role TEXT PRIMARY KEY NOT NULL,
    rate_count INTEGER,
    period_ms INTEGER,
    max_running INTEGER,
    tokens REAL NOT NULL DEFAULT 0,
    refilled_at_ms INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
