-- ratelimits: fleet-wide rate limits and caps per role (rules/ratelimits.py).

-- name: ratelimits.get
SELECT * FROM rate_limits WHERE role = ?;

-- The role's tasks leased now.
-- name: ratelimits.running
SELECT count(*) FROM tasks WHERE lease_expires_at_ms > ? AND role = ?;

-- name: ratelimits.spend
UPDATE rate_limits SET tokens = ?, refilled_at_ms = ? WHERE role = ?;

-- name: ratelimits.put
INSERT OR REPLACE INTO rate_limits (role, rate_count, period_ms, max_running, tokens,
    refilled_at_ms, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: ratelimits.delete
DELETE FROM rate_limits WHERE role = ?;

-- name: ratelimits.list
SELECT * FROM rate_limits ORDER BY role;
