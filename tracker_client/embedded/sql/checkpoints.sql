-- checkpoints: a run's checkpoint, and the latest one a new attempt resumes from
-- (rules/checkpoints.py).

-- name: checkpoints.write
UPDATE runs SET checkpoint = ? WHERE id = ?;

-- name: checkpoints.flag_task
UPDATE tasks SET checkpointed = 1 WHERE seq = ?;

-- name: checkpoints.latest
SELECT id, checkpoint FROM runs WHERE task_id = ? AND checkpoint IS NOT NULL
AND attempt < ? ORDER BY attempt DESC LIMIT 1;
