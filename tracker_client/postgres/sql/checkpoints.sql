-- checkpoints: a run's checkpoint, and the latest one a new attempt resumes from
-- (rules/checkpoints.py).

-- name: checkpoints.write
UPDATE runs SET checkpoint = %s WHERE id = %s;

-- name: checkpoints.flag_task
UPDATE tasks SET checkpointed = 1 WHERE seq = %s;

-- name: checkpoints.latest
SELECT id, checkpoint FROM runs WHERE task_id = %s AND checkpoint IS NOT NULL
AND attempt < %s ORDER BY attempt DESC LIMIT 1;

