-- common: what every area reads or writes (rules/common.py): a task's row, an event, a
-- role's depth, a task's dependencies and assignments.

-- name: common.task
SELECT * FROM tasks WHERE id = ?;

-- name: common.add_event
-- many
-- values
INSERT INTO events (task_id, run_id, ts_ms, kind, data) VALUES (?, ?, ?, ?, ?);

-- Waiting tasks of a role now.
-- name: common.depth
SELECT count(*) FROM tasks WHERE role = ? AND dead_letter_reason IS NULL
AND terminal = 0 AND lease_expires_at_ms <= ?;

-- A task's dependencies, each with whether its upstream is resolved (terminal, not
-- dead-lettered).
-- name: common.dependencies
SELECT d.depends_on_task_id, coalesce(u.terminal = 1 AND u.dead_letter_reason IS NULL, 0)
FROM dependencies d
LEFT JOIN tasks u ON u.id = d.depends_on_task_id WHERE d.task_id = ? ORDER BY d.seq;

-- name: common.assignments
SELECT * FROM assignments WHERE task_id = ? ORDER BY seq;
