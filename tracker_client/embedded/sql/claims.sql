-- claims: the claim's scan, heartbeat, and the reclaim of expired leases and past-deadline
-- tasks (rules/claims.py; rules/claim_many.py scans with the same statements).

-- The role's claimable tasks, best first: one indexed scan, delayed and leased rows skipped
-- inside the index. The columns a claim reads (the task's fields, what the pick checks,
-- what the lease and a dead letter of an unreadable row write), not the lease's or the
-- budgets' counters: each column read is a Python value made and a dict entry per row.
-- name: claims.candidates
SELECT seq, id, pipeline_id, stage, title, description, priority, metadata, task_version,
    next_eligible_at_ms, retry_delay_ms, max_attempts, dead_letter_stage, dead_letter_reason,
    created_at_ms, updated_at_ms, concurrency_key, expires_at_ms, run_at_ms, dedupe_key,
    parent_id, max_stale_attempts, stale_streak, budgets, failed_attempts, last_attempt,
    has_deps, assignee, checkpointed, pipeline_version
FROM tasks INDEXED BY tasks_claim
WHERE role = ? AND dead_letter_reason IS NULL AND terminal = 0
AND next_eligible_at_ms <= ? AND lease_expires_at_ms <= ?
ORDER BY priority DESC, seq;

-- (a lease has lapsed, a waiting task is past its deadline) at :now.
-- name: claims.housekeeping
SELECT EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at_ms > 0
    AND lease_expires_at_ms <= :now),
EXISTS (SELECT 1 FROM tasks WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= :now
    AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= :now);

-- A dependency of the task (by seq) not resolved yet.
-- name: claims.unresolved
SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
WHERE d.task_id = (SELECT id FROM tasks WHERE seq = ?)
AND (u.terminal = 0 OR u.dead_letter_reason IS NOT NULL) LIMIT 1;

-- Another task holding the concurrency key under a live lease.
-- name: claims.key_held
SELECT 1 FROM tasks WHERE concurrency_key = ? AND lease_expires_at_ms > ? AND seq != ? LIMIT 1;

-- name: claims.stage_leases
SELECT count(*) FROM tasks WHERE lease_expires_at_ms > ? AND stage = ?;

-- name: claims.lapsed
SELECT id, lease_run_id FROM tasks
WHERE lease_expires_at_ms > 0 AND lease_expires_at_ms <= ?;

-- name: claims.stale_run
UPDATE runs SET status = 'stale', ended_at_ms = ? WHERE id = ?;

-- A lapsed lease dropped, its stale streak counted.
-- name: claims.drop_lapsed
UPDATE tasks SET stale_streak = stale_streak + 1,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE id = ?;

-- name: claims.overdue
SELECT id, has_deps FROM tasks WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?
AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= ? ORDER BY seq;

-- The unfinished, not dead-lettered tasks a task waits on.
-- name: claims.live_upstreams
SELECT u.id, u.has_deps FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
WHERE d.task_id = ? AND u.dead_letter_reason IS NULL AND u.terminal = 0 ORDER BY d.seq;

-- name: claims.add_run
-- many
-- values
INSERT INTO runs (id, task_id, attempt, status, agent_id, agent_role, started_at_ms)
VALUES (?, ?, ?, 'running', ?, ?, ?);

-- name: claims.lease
-- many
UPDATE tasks SET lease_expires_at_ms = ?, last_attempt = ?, lease_id = ?,
    lease_run_id = ?, lease_token_sha256 = ?, lease_ttl_ms = ?
WHERE seq = ?;

-- The run of a lease named only by its id (the partial index on held leases answers it).
-- name: claims.run_of_lease
SELECT lease_run_id FROM tasks WHERE lease_expires_at_ms > 0 AND lease_id = ?;

-- name: claims.extend
UPDATE tasks SET lease_expires_at_ms = ? WHERE seq = ?;

-- name: claims.task_of_run
SELECT t.* FROM runs r JOIN tasks t ON t.id = r.task_id WHERE r.id = ?;

-- name: claims.set_token
UPDATE tasks SET lease_token_sha256 = ? WHERE seq = ?;

-- name: claims.run
SELECT * FROM runs WHERE id = ?;

-- A lease claimed ahead and never handed out, withdrawn (claiming ahead, tracker_client/ahead.py):
-- the task as if it had not been claimed (its attempt count back), while the lease is still as
-- claimed and untouched (never heartbeated, no event of its run: what an executor's run would
-- leave, so a lease token cannot erase a run that ran); then its run, which no executor saw, goes.
-- name: claims.withdraw_lease
UPDATE tasks SET lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL,
    lease_token_sha256 = NULL, lease_ttl_ms = NULL, last_attempt = last_attempt - 1
WHERE lease_run_id = :run AND lease_token_sha256 = :digest AND lease_expires_at_ms > 0
AND last_attempt = (SELECT attempt FROM runs WHERE id = :run AND status = 'running')
AND lease_expires_at_ms <= (SELECT started_at_ms FROM runs WHERE id = :run) + lease_ttl_ms
AND NOT EXISTS (SELECT 1 FROM events WHERE run_id = :run);

-- name: claims.withdraw_run
DELETE FROM runs WHERE id = ? AND status = 'running';
