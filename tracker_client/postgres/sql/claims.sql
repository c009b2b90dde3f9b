-- claims: the claim's scan, heartbeat, and the reclaim of expired leases and past-deadline
-- tasks (rules/claims.py; rules/claim_many.py scans with the same statements).

-- The role's claimable tasks, best first (the planner picks the partial index on claimable
-- rows itself; the rail's own claim is claim.one, this scan serves the rules' claim).
-- name: claims.candidates
SELECT * FROM tasks
WHERE role = %s AND dead_letter_reason IS NULL AND terminal = 0
AND next_eligible_at_ms <= %s AND lease_expires_at_ms <= %s
ORDER BY priority DESC, seq;

-- (a lease has lapsed, a waiting task is past its deadline) at :now.
-- name: claims.housekeeping
SELECT EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at_ms > 0
    AND lease_expires_at_ms <= %(now)s),
EXISTS (SELECT 1 FROM tasks WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= %(now)s
    AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= %(now)s);

-- A dependency of the task (by seq) not resolved yet.
-- name: claims.unresolved
SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
WHERE d.task_id = (SELECT id FROM tasks WHERE seq = %s)
AND (u.terminal = 0 OR u.dead_letter_reason IS NOT NULL) LIMIT 1;

-- Another task holding the concurrency key under a live lease.
-- name: claims.key_held
SELECT 1 FROM tasks WHERE concurrency_key = %s AND lease_expires_at_ms > %s AND seq != %s LIMIT 1;

-- name: claims.stage_leases
SELECT count(*) FROM tasks WHERE lease_expires_at_ms > %s AND stage = %s;

-- name: claims.lapsed
SELECT id, lease_run_id FROM tasks
WHERE lease_expires_at_ms > 0 AND lease_expires_at_ms <= %s;

-- name: claims.stale_run
UPDATE runs SET status = 'stale', ended_at_ms = %s WHERE id = %s;

-- A lapsed lease dropped, its stale streak counted.
-- name: claims.drop_lapsed
UPDATE tasks SET stale_streak = stale_streak + 1,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE id = %s;

-- name: claims.overdue
SELECT id, has_deps FROM tasks WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= %s
AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= %s ORDER BY seq;

-- The unfinished, not dead-lettered tasks a task waits on.
-- name: claims.live_upstreams
SELECT u.id, u.has_deps FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
WHERE d.task_id = %s AND u.dead_letter_reason IS NULL AND u.terminal = 0 ORDER BY d.seq;

-- name: claims.add_run
INSERT INTO runs (id, task_id, attempt, status, agent_id, agent_role, started_at_ms)
VALUES (%s, %s, %s, 'running', %s, %s, %s);

-- name: claims.lease
UPDATE tasks SET lease_expires_at_ms = %s, last_attempt = %s, lease_id = %s,
    lease_run_id = %s, lease_token_sha256 = %s, lease_ttl_ms = %s
WHERE seq = %s;

-- The run of a lease named only by its id (the partial index on held leases answers it).
-- name: claims.run_of_lease
SELECT lease_run_id FROM tasks WHERE lease_expires_at_ms > 0 AND lease_id = %s;

-- name: claims.extend
-- shared
-- deferred
UPDATE tasks SET lease_expires_at_ms = %s WHERE seq = %s;

-- name: claims.task_of_run
SELECT t.* FROM runs r JOIN tasks t ON t.id = r.task_id WHERE r.id = %s;

-- name: claims.set_token
UPDATE tasks SET lease_token_sha256 = %s WHERE seq = %s;

-- name: claims.run
SELECT * FROM runs WHERE id = %s;


-- name: claims.live_runs
-- only: postgres
SELECT lease_run_id FROM tasks WHERE lease_run_id = ANY(%s) AND lease_expires_at_ms > %s;

-- A lease claimed ahead and never handed out, withdrawn (claiming ahead, tracker_client/ahead.py):
-- the task as if it had not been claimed (its attempt count back), while the lease is still as
-- claimed (its run running, its token, its attempt) and untouched (never heartbeated, no event of
-- its run: what an executor's run would leave, so a lease token cannot erase a run that ran); the
-- row found through the run's key. Then
-- its run, which no executor saw, goes. Each touches only that task's row and its run.
-- name: claims.withdraw_lease
-- shared
UPDATE tasks t SET lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL,
    lease_token_sha256 = NULL, lease_ttl_ms = NULL, last_attempt = t.last_attempt - 1
FROM runs r
WHERE r.id = %(run)s AND r.status = 'running' AND t.id = r.task_id AND t.lease_run_id = r.id
AND t.lease_token_sha256 = %(digest)s AND t.lease_expires_at_ms > 0
AND t.last_attempt = r.attempt AND t.lease_expires_at_ms <= r.started_at_ms + t.lease_ttl_ms
AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id);

-- name: claims.withdraw_run
-- shared
-- deferred
DELETE FROM runs WHERE id = %s AND status = 'running';
