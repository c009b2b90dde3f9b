-- fanin: dependency edges added by a transition's wait_for, cycles refused, dead upstreams
-- found (rules/fanin.py).

-- name: fanin.upstreams
SELECT depends_on_task_id FROM dependencies WHERE task_id = ?;

-- name: fanin.edge
SELECT 1 FROM dependencies WHERE task_id = ? AND depends_on_task_id = ?;

-- name: fanin.flag_deps
UPDATE tasks SET has_deps = 1 WHERE id = ?;

-- The first dead-lettered (or cancelled) upstream of a task.
-- name: fanin.dead_upstream
SELECT u.* FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
WHERE d.task_id = ? AND u.dead_letter_reason IS NOT NULL ORDER BY d.seq LIMIT 1;

-- The unfinished tasks that depend on a task (its waiting dependents).
-- name: fanin.waiting_on
SELECT t.* FROM dependencies d JOIN tasks t ON t.id = d.task_id
WHERE d.depends_on_task_id = ? AND t.dead_letter_reason IS NULL AND t.terminal = 0
ORDER BY t.seq;
