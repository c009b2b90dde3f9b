-- verify: the rail's invariants (rules/verify.py), in PostgreSQL. Each answers the rows that break one.

-- name: verify.lease_without_running_run
SELECT t.id, t.lease_run_id FROM tasks t
WHERE t.lease_expires_at_ms > 0 AND NOT EXISTS (
    SELECT 1 FROM runs r WHERE r.id = t.lease_run_id AND r.status = 'running')
ORDER BY t.seq;

-- name: verify.running_run_without_lease
SELECT r.id, r.task_id FROM runs r
WHERE r.status = 'running' AND NOT EXISTS (
    SELECT 1 FROM tasks t WHERE t.id = r.task_id AND t.lease_run_id = r.id
        AND t.lease_expires_at_ms > 0)
ORDER BY r.started_at_ms, r.id;

-- name: verify.run_without_task
SELECT r.id, r.task_id FROM runs r
WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = r.task_id)
ORDER BY r.started_at_ms, r.id;

-- name: verify.event_without_task
SELECT e.id, e.task_id FROM events e
WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = e.task_id)
ORDER BY e.id;

-- name: verify.attempt_ahead
SELECT t.id, 'run ' || r.id || ' is attempt ' || r.attempt::text || ', last attempt ' || t.last_attempt::text
FROM tasks t JOIN runs r ON r.task_id = t.id
WHERE r.attempt > t.last_attempt
ORDER BY t.seq;

-- name: verify.version_not_positive
SELECT id, 'version ' || task_version::text FROM tasks WHERE task_version < 1 ORDER BY seq;

-- name: verify.finished_with_lease
SELECT id, lease_run_id FROM tasks
WHERE lease_expires_at_ms > 0 AND (terminal <> 0 OR dead_letter_reason IS NOT NULL)
ORDER BY seq;

-- name: verify.task_without_pipeline
SELECT t.id, t.pipeline_id FROM tasks t
WHERE NOT EXISTS (SELECT 1 FROM pipelines p WHERE p.id = t.pipeline_id)
ORDER BY t.seq;

-- name: verify.dependency_dangling
SELECT d.task_id, 'depends on ' || d.depends_on_task_id FROM dependencies d
WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = d.task_id)
   OR NOT EXISTS (SELECT 1 FROM tasks u WHERE u.id = d.depends_on_task_id)
ORDER BY d.seq;

-- name: verify.count_tasks
SELECT count(*) FROM tasks;

-- name: verify.count_leased
SELECT count(*) FROM tasks WHERE lease_expires_at_ms > 0;

-- name: verify.count_runs
SELECT count(*) FROM runs;

-- name: verify.count_events
SELECT count(*) FROM events;
