-- links: the agents a task is reserved for (rules/links.py; its dependency edges use
-- tasks.add_dependency and fanin's statements).

-- Every other active assignment of the task ends.
-- name: links.deactivate_others
UPDATE assignments SET active = 0, updated_at_ms = ?
WHERE task_id = ? AND active = 1 AND agent_id != ?;

-- name: links.assign
INSERT INTO assignments (task_id, agent_id, assigned_by, active, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (task_id, agent_id) DO UPDATE
SET active = 1, assigned_by = excluded.assigned_by, updated_at_ms = excluded.updated_at_ms;

-- name: links.set_assignee
UPDATE tasks SET assignee = ? WHERE id = ?;

-- name: links.deactivate
UPDATE assignments SET active = 0, updated_at_ms = ?
WHERE task_id = ? AND agent_id = ? AND active = 1;

-- name: links.clear_assignee
UPDATE tasks SET assignee = NULL WHERE id = ?;
