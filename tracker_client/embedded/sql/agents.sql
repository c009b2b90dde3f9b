-- agents: list_upstream and a human step's transition (rules/agents.py).

-- name: agents.upstream
SELECT u.* FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
WHERE d.task_id = ? ORDER BY d.seq;

-- The task's last `result` event (its runs' events and its task-level events).
-- name: agents.last_result
SELECT id, data FROM events
WHERE (run_id IN (SELECT id FROM runs WHERE task_id = :task_id)
    OR (run_id IS NULL AND task_id = :task_id))
    AND kind = 'result'
ORDER BY id DESC LIMIT 1;

-- name: agents.artifacts
SELECT * FROM artifacts WHERE task_id = ? ORDER BY created_at_ms, seq;

-- name: agents.move
UPDATE tasks SET stage = ?, task_version = task_version + 1, next_eligible_at_ms = 0,
    updated_at_ms = ?, role = ?, terminal = ?, stale_streak = 0,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL,
    lease_token_sha256 = NULL, lease_ttl_ms = NULL
WHERE seq = ?;
