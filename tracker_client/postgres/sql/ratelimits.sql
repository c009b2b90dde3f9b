-- ratelimits: fleet-wide rate limits and caps per role (rules/ratelimits.py).

-- name: ratelimits.get
SELECT * FROM rate_limits WHERE role = %s;

-- The role's tasks leased now.
-- name: ratelimits.running
SELECT count(*) FROM tasks WHERE lease_expires_at_ms > %s AND role = %s;

-- name: ratelimits.spend
UPDATE rate_limits SET tokens = %s, refilled_at_ms = %s WHERE role = %s;

-- name: ratelimits.put
INSERT INTO rate_limits (role, rate_count, period_ms, max_running, tokens,
    refilled_at_ms, created_at_ms, updated_at_ms)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (role) DO UPDATE SET rate_count = EXCLUDED.rate_count,
    period_ms = EXCLUDED.period_ms, max_running = EXCLUDED.max_running,
    tokens = EXCLUDED.tokens, refilled_at_ms = EXCLUDED.refilled_at_ms,
    created_at_ms = EXCLUDED.created_at_ms, updated_at_ms = EXCLUDED.updated_at_ms;

-- name: ratelimits.delete
DELETE FROM rate_limits WHERE role = %s;

-- name: ratelimits.list
SELECT * FROM rate_limits ORDER BY role;
