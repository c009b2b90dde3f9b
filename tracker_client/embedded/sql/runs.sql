-- runs: the writes fenced by a lease (events, transition, fail) and dead-lettering
-- (rules/runs.py).

-- name: runs.status
SELECT status FROM runs WHERE id = ?;

-- The task columns a lease write reads (check_lease's row): the lease itself, what the lease
-- writes (transition, fail with its retry policy, events, heartbeat, checkpoint, release) read
-- of their task. Not t.*: title, description and metadata are never read there, and decoding
-- the whole row cost more than the lookup.
-- name: runs.lease
SELECT t.seq, t.id, t.pipeline_id, t.stage, t.role, t.task_version, t.failed_attempts,
    t.max_attempts, t.retry_delay_ms, t.backoff, t.max_retry_delay_ms, t.checkpointed,
    t.lease_id, t.lease_run_id, t.lease_token_sha256, t.lease_expires_at_ms, t.lease_ttl_ms,
    t.budgets, t.pipeline_version
FROM runs r JOIN tasks t ON t.id = r.task_id WHERE r.id = ?;

-- name: runs.complete
-- many
UPDATE runs SET status = 'completed', ended_at_ms = ?, usage = ? WHERE id = ?;

-- The task moves along a transition; its lease is dropped.
-- name: runs.move
UPDATE tasks SET stage = ?, task_version = task_version + 1, dead_letter_reason = NULL,
    next_eligible_at_ms = 0, updated_at_ms = ?, role = ?, terminal = ?, stale_streak = 0,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = ?;

-- runs.move for a lease checked as this process handed it out (rules/runs.py plain_move): it
-- moves the task only while the row is still so (no row changed: the caller reads it then).
-- Positional, the time given twice: binding ten names cost more than the WHERE's checks.
-- SQLite's only: a PostgreSQL process remembers no lease it handed out (its batch is one
-- statement on the server, tracker_client/postgres/sql/finish_many.sql).
-- name: runs.move_held
-- only: sqlite
-- many
UPDATE tasks SET stage = ?, task_version = task_version + 1, dead_letter_reason = NULL,
    next_eligible_at_ms = 0, updated_at_ms = ?, role = ?, terminal = ?, stale_streak = 0,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = ? AND lease_run_id = ? AND lease_token_sha256 = ? AND lease_expires_at_ms > ?
AND stage = ? AND task_version = ? AND pipeline_version IS ? AND budgets IS NULL;

-- name: runs.fail
UPDATE runs SET status = 'failed', ended_at_ms = ?, error = ?, usage = ? WHERE id = ?;

-- A failure counted; the lease is dropped.
-- name: runs.count_failure
UPDATE tasks SET failed_attempts = ?, stale_streak = 0,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = ?;

-- name: runs.retry_at
UPDATE tasks SET next_eligible_at_ms = ?, updated_at_ms = ? WHERE seq = ?;

-- name: runs.cancel
UPDATE runs SET status = 'cancelled', ended_at_ms = ? WHERE id = ?;

-- The task is dead-lettered (moved to its dead-letter stage, if any); the lease is dropped.
-- name: runs.dead_letter
UPDATE tasks SET dead_letter_reason = ?, next_eligible_at_ms = ?,
    dead_letter_from_stage = ?, stage = ?, role = ?, terminal = ?,
    task_version = task_version + ?, updated_at_ms = ?,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = ?;
