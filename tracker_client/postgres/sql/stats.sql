-- stats: health and per-role queue figures (rules/stats.py).

-- A round trip that reads no table (the worker's start-up probe).
-- name: stats.ping
SELECT 1;

-- name: stats.stages
SELECT stage, count(*) FROM tasks GROUP BY stage ORDER BY stage;

-- The leases live at now (the `> 0` lets the partial index tasks_leased answer under a generic
-- plan too, whatever now is, instead of a scan of every task kept).
-- name: stats.live_leases
SELECT count(*) FROM tasks WHERE lease_expires_at_ms > 0 AND lease_expires_at_ms > %s;

-- Waiting tasks: (role, dependencies resolved, concurrency key free, eligible at, created at,
-- run at). Claimable = eligible, dependencies resolved and its key not held by a live lease.
-- name: stats.waiting
SELECT t.role,
    NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
        WHERE d.task_id = t.id AND (u.terminal = 0 OR u.dead_letter_reason IS NOT NULL)),
    t.concurrency_key IS NULL OR NOT EXISTS (SELECT 1 FROM tasks k
        WHERE k.concurrency_key = t.concurrency_key AND k.lease_expires_at_ms > %(now)s),
    t.next_eligible_at_ms, t.created_at_ms, t.run_at_ms, t.spent_usd, t.spent_tokens
FROM tasks t
WHERE t.role IS NOT NULL AND t.dead_letter_reason IS NULL AND t.terminal = 0
    AND t.lease_expires_at_ms <= %(now)s;

-- The runs holding a live lease (tasks_leased, as stats.live_leases).
-- name: stats.running
SELECT r.agent_role, t.lease_expires_at_ms, r.started_at_ms, t.lease_ttl_ms, t.spent_usd,
    t.spent_tokens FROM tasks t
JOIN runs r ON r.id = t.lease_run_id
WHERE t.lease_expires_at_ms > 0 AND t.lease_expires_at_ms > %s;

-- name: stats.failed
SELECT t.role, count(*) FROM runs r JOIN tasks t ON t.id = r.task_id
WHERE r.status = 'failed' AND t.role IS NOT NULL GROUP BY t.role;

-- name: stats.dead
SELECT pipeline_id, dead_letter_from_stage, count(*),
    sum(CASE WHEN dead_letter_reason = 'budget_exceeded' THEN 1 ELSE 0 END) FROM tasks
WHERE dead_letter_reason IS NOT NULL GROUP BY pipeline_id, dead_letter_from_stage;
