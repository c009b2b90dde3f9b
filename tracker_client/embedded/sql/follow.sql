-- follow: a task's state beside its events (rules/follow.py).

-- name: follow.state
SELECT stage, pipeline_id, dead_letter_reason FROM tasks WHERE id = ?;
