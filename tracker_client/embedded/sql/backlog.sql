-- backlog: cancel, requeue, maintenance and the wait answer (rules/backlog.py).

-- name: backlog.cancel_run
UPDATE runs SET status = 'cancelled', ended_at_ms = ? WHERE id = ?;

-- name: backlog.children
SELECT id FROM tasks WHERE parent_id = ? ORDER BY seq;

-- cancel_all of a pipeline (and of one role in it, when :role is given).
-- name: backlog.unfinished_of_pipeline
SELECT * FROM tasks WHERE dead_letter_reason IS NULL AND terminal = 0
    AND pipeline_id = :pipeline AND (:role IS NULL OR role = :role)
ORDER BY seq;

-- cancel_all of a role in every pipeline.
-- name: backlog.unfinished_of_role
SELECT * FROM tasks WHERE dead_letter_reason IS NULL AND terminal = 0 AND role = ?
ORDER BY seq;

-- name: backlog.requeue
UPDATE tasks SET stage = ?, task_version = ?, dead_letter_reason = NULL,
    dead_letter_from_stage = NULL, next_eligible_at_ms = 0, stale_streak = 0,
    failed_attempts = CASE WHEN ? THEN 0 ELSE failed_attempts END, expires_at_ms = NULL,
    role = ?, terminal = ?, updated_at_ms = ?
WHERE seq = ?;

-- requeue_all's dead letters (rules/backlog.py DeadLetters): a pipeline's, dead-lettered no
-- later than :until (and no earlier than :since, when given), of :reason when given.
-- name: backlog.dead_letter_counts
SELECT dead_letter_reason, count(*) FROM tasks
WHERE pipeline_id = :pipeline AND dead_letter_reason IS NOT NULL AND seq > :after
    AND updated_at_ms <= :until
    AND (:reason IS NULL OR dead_letter_reason = :reason)
    AND (:since IS NULL OR updated_at_ms >= :since)
GROUP BY dead_letter_reason ORDER BY dead_letter_reason;

-- name: backlog.dead_letter_batch
SELECT * FROM tasks
WHERE pipeline_id = :pipeline AND dead_letter_reason IS NOT NULL AND seq > :after
    AND updated_at_ms <= :until
    AND (:reason IS NULL OR dead_letter_reason = :reason)
    AND (:since IS NULL OR updated_at_ms >= :since)
ORDER BY seq LIMIT :limit;

-- name: backlog.drop_keys
DELETE FROM idempotency WHERE created_at_ms < ?;

-- name: backlog.artifacts
SELECT * FROM artifacts WHERE task_id = ? ORDER BY created_at_ms, seq;

-- The task's last `result` event (its runs' events and its task-level events).
-- name: backlog.last_result
SELECT * FROM events
WHERE (run_id IN (SELECT id FROM runs WHERE task_id = :task_id)
    OR (run_id IS NULL AND task_id = :task_id))
    AND kind = 'result'
ORDER BY id DESC LIMIT 1;
