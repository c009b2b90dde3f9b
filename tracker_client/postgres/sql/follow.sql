-- follow: a task's state beside its events (rules/follow.py), and the follow channel's
-- interest rows (postgres/follow.py).

-- name: follow.state
SELECT stage, pipeline_id, dead_letter_reason FROM tasks WHERE id = %s;
