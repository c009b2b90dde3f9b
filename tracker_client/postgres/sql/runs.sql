-- runs: the writes fenced by a lease (events, transition, fail) and dead-lettering
-- (rules/runs.py).

-- name: runs.status
SELECT status FROM runs WHERE id = %s;

-- The task columns a lease write reads (check_lease's row); inside a write the variant
-- runs.lease_locked locks the task's row as well.
-- name: runs.lease
-- in-write: runs.lease_locked
SELECT t.seq, t.id, t.pipeline_id, t.stage, t.role, t.task_version, t.failed_attempts,
    t.max_attempts, t.retry_delay_ms, t.backoff, t.max_retry_delay_ms, t.checkpointed,
    t.lease_id, t.lease_run_id, t.lease_token_sha256, t.lease_expires_at_ms, t.lease_ttl_ms,
    t.budgets, t.pipeline_version
FROM runs r JOIN tasks t ON t.id = r.task_id WHERE r.id = %s;

-- runs.lease inside a write: the task's row locked (FOR NO KEY UPDATE: an event's foreign-key
-- check still passes beside it), so a heartbeat, a transition and a claim's reissue of one
-- lease run one after the other.
-- name: runs.lease_locked
-- only: postgres
SELECT t.seq, t.id, t.pipeline_id, t.stage, t.role, t.task_version, t.failed_attempts,
    t.max_attempts, t.retry_delay_ms, t.backoff, t.max_retry_delay_ms, t.checkpointed,
    t.lease_id, t.lease_run_id, t.lease_token_sha256, t.lease_expires_at_ms, t.lease_ttl_ms,
    t.budgets, t.pipeline_version
FROM runs r JOIN tasks t ON t.id = r.task_id WHERE r.id = %s
FOR NO KEY UPDATE OF t;

-- name: runs.complete
-- shared
-- deferred
UPDATE runs SET status = 'completed', ended_at_ms = %s, usage = %s WHERE id = %s;

-- The task moves along a transition; its lease is dropped.
-- name: runs.move
-- shared
-- deferred
UPDATE tasks SET stage = %s, task_version = task_version + 1, dead_letter_reason = NULL,
    next_eligible_at_ms = 0, updated_at_ms = %s, role = %s, terminal = %s, stale_streak = 0,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = %s;

-- name: runs.fail
-- shared
-- deferred
UPDATE runs SET status = 'failed', ended_at_ms = %s, error = %s, usage = %s WHERE id = %s;

-- A failure counted; the lease is dropped.
-- name: runs.count_failure
-- shared
-- deferred
UPDATE tasks SET failed_attempts = %s, stale_streak = 0,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = %s;

-- name: runs.retry_at
-- shared
-- deferred
UPDATE tasks SET next_eligible_at_ms = %s, updated_at_ms = %s WHERE seq = %s;

-- name: runs.cancel
UPDATE runs SET status = 'cancelled', ended_at_ms = %s WHERE id = %s;

-- The task is dead-lettered (moved to its dead-letter stage, if any); the lease is dropped.
-- name: runs.dead_letter
UPDATE tasks SET dead_letter_reason = %s, next_eligible_at_ms = %s,
    dead_letter_from_stage = %s, stage = %s, role = %s, terminal = %s,
    task_version = task_version + %s, updated_at_ms = %s,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = %s;

