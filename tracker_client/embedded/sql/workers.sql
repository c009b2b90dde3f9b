-- workers: the live worker registry (rules/workers.py).

-- The runs whose task still holds their live lease.
-- name: workers.live_runs
SELECT r.id, r.task_id, r.agent_role, r.started_at_ms, r.agent_id FROM tasks t
JOIN runs r ON r.id = t.lease_run_id
WHERE t.lease_expires_at_ms > ? AND r.status = 'running'
ORDER BY r.started_at_ms, r.id;

-- name: workers.live_runs_of
SELECT r.id, r.task_id, r.agent_role, r.started_at_ms, r.agent_id FROM tasks t
JOIN runs r ON r.id = t.lease_run_id
WHERE t.lease_expires_at_ms > ? AND r.status = 'running' AND r.agent_id = ?
ORDER BY r.started_at_ms, r.id;

-- name: workers.seen_since
SELECT * FROM workers WHERE last_seen_at_ms >= ?;

-- name: workers.seen_since_of
SELECT * FROM workers WHERE last_seen_at_ms >= ? AND agent_id = ?;

-- name: workers.forget_silent
DELETE FROM workers WHERE last_seen_at_ms < ? AND id != ?;

-- name: workers.upsert
INSERT INTO workers (id, host, pid, version, roles, slots, agent_id, run_ids,
    started_at_ms, registered_at_ms, last_seen_at_ms, lost_after_ms, stopping)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, version = excluded.version,
    roles = excluded.roles, slots = excluded.slots, agent_id = excluded.agent_id,
    run_ids = excluded.run_ids, started_at_ms = excluded.started_at_ms,
    last_seen_at_ms = excluded.last_seen_at_ms, lost_after_ms = excluded.lost_after_ms,
    stopping = excluded.stopping;

-- name: workers.get
SELECT * FROM workers WHERE id = ?;

-- name: workers.delete
DELETE FROM workers WHERE id = ?;
