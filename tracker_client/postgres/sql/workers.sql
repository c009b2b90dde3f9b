-- workers: the live worker registry (rules/workers.py).

-- The runs whose task still holds their live lease.
-- name: workers.live_runs
SELECT r.id, r.task_id, r.agent_role, r.started_at_ms, r.agent_id FROM tasks t
JOIN runs r ON r.id = t.lease_run_id
WHERE t.lease_expires_at_ms > %s AND r.status = 'running'
ORDER BY r.started_at_ms, r.id;

-- name: workers.live_runs_of
SELECT r.id, r.task_id, r.agent_role, r.started_at_ms, r.agent_id FROM tasks t
JOIN runs r ON r.id = t.lease_run_id
WHERE t.lease_expires_at_ms > %s AND r.status = 'running' AND r.agent_id = %s
ORDER BY r.started_at_ms, r.id;

-- name: workers.seen_since
SELECT * FROM workers WHERE last_seen_at_ms >= %s;

-- name: workers.seen_since_of
SELECT * FROM workers WHERE last_seen_at_ms >= %s AND agent_id = %s;

-- name: workers.forget_silent
DELETE FROM workers WHERE last_seen_at_ms < %s AND id <> %s;

-- name: workers.upsert
INSERT INTO workers (id, host, pid, version, roles, slots, agent_id, run_ids,
    started_at_ms, registered_at_ms, last_seen_at_ms, lost_after_ms, stopping)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
    roles = EXCLUDED.roles, slots = EXCLUDED.slots, agent_id = EXCLUDED.agent_id,
    run_ids = EXCLUDED.run_ids, started_at_ms = EXCLUDED.started_at_ms,
    last_seen_at_ms = EXCLUDED.last_seen_at_ms, lost_after_ms = EXCLUDED.lost_after_ms,
    stopping = EXCLUDED.stopping;

-- name: workers.get
SELECT * FROM workers WHERE id = %s;

-- name: workers.delete
DELETE FROM workers WHERE id = %s;
