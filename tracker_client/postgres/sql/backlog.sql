-- backlog: cancel, requeue, maintenance and the wait answer (rules/backlog.py).

-- name: backlog.cancel_run
UPDATE runs SET status = 'cancelled', ended_at_ms = %s WHERE id = %s;

-- name: backlog.children
SELECT id FROM tasks WHERE parent_id = %s ORDER BY seq;

-- cancel_all of a pipeline (and of one role in it, when :role is given).
-- name: backlog.unfinished_of_pipeline
SELECT * FROM tasks WHERE dead_letter_reason IS NULL AND terminal = 0
    AND pipeline_id = %(pipeline)s AND (%(role)s::text IS NULL OR role = %(role)s)
ORDER BY seq;

-- cancel_all of a role in every pipeline.
-- name: backlog.unfinished_of_role
SELECT * FROM tasks WHERE dead_letter_reason IS NULL AND terminal = 0 AND role = %s
ORDER BY seq;

-- The reset flag is bound as 0/1 (the schema keeps integer flags): compared, not tested.
-- name: backlog.requeue
UPDATE tasks SET stage = %s, task_version = %s, dead_letter_reason = NULL,
    dead_letter_from_stage = NULL, next_eligible_at_ms = 0, stale_streak = 0,
    failed_attempts = CASE WHEN (%s) <> 0 THEN 0 ELSE failed_attempts END,
    expires_at_ms = NULL, role = %s, terminal = %s, updated_at_ms = %s
WHERE seq = %s;

-- requeue_all's dead letters (rules/backlog.py DeadLetters): a pipeline's, dead-lettered no
-- later than :until (and no earlier than :since, when given), of :reason when given.
-- name: backlog.dead_letter_counts
SELECT dead_letter_reason, count(*) FROM tasks
WHERE pipeline_id = %(pipeline)s AND dead_letter_reason IS NOT NULL AND seq > %(after)s
    AND updated_at_ms <= %(until)s
    AND (%(reason)s::text IS NULL OR dead_letter_reason = %(reason)s)
    AND (%(since)s::bigint IS NULL OR updated_at_ms >= %(since)s)
GROUP BY dead_letter_reason ORDER BY dead_letter_reason;

-- name: backlog.dead_letter_batch
SELECT * FROM tasks
WHERE pipeline_id = %(pipeline)s AND dead_letter_reason IS NOT NULL AND seq > %(after)s
    AND updated_at_ms <= %(until)s
    AND (%(reason)s::text IS NULL OR dead_letter_reason = %(reason)s)
    AND (%(since)s::bigint IS NULL OR updated_at_ms >= %(since)s)
ORDER BY seq LIMIT %(limit)s;

-- name: backlog.drop_keys
DELETE FROM idempotency WHERE created_at_ms < %s;

-- name: backlog.artifacts
SELECT * FROM artifacts WHERE task_id = %s ORDER BY created_at_ms, seq;

-- The task's last `result` event (its runs' events and its task-level events).
-- name: backlog.last_result
SELECT * FROM events
WHERE (run_id IN (SELECT id FROM runs WHERE task_id = %(task_id)s)
    OR (run_id IS NULL AND task_id = %(task_id)s))
    AND kind = 'result'
ORDER BY id DESC LIMIT 1;
