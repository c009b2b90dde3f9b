-- tasks: pipelines and tasks created, a task read, tasks and runs listed (rules/tasks.py).

-- name: tasks.pipeline_named
SELECT 1 FROM pipelines WHERE name = %s;

-- name: tasks.add_pipeline
INSERT INTO pipelines (id, name, definition, created_at_ms) VALUES (%s, %s, %s, %s);

-- name: tasks.exists
SELECT 1 FROM tasks WHERE id = %s;

-- The parameters in the order of rules/tasks.py's _KEYS. A create's one round trip sends it as
-- EXECUTE of a statement prepared once per connection (planned there, not at every create).
-- name: tasks.insert
-- deferred
-- prepared: _bw_task_insert
INSERT INTO tasks (id, pipeline_id, stage, title, description, priority, metadata,
    retry_delay_ms, max_attempts, dead_letter_stage, backoff, max_retry_delay_ms,
    created_at_ms, updated_at_ms, concurrency_key, expires_at_ms, max_stale_attempts, role,
    terminal, has_deps, assignee, next_eligible_at_ms, run_at_ms, dedupe_key, dedupe_window_ms,
    pipeline_version)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: tasks.set_parent
UPDATE tasks SET parent_id = %s WHERE id = %s;

-- name: tasks.add_dependency
INSERT INTO dependencies (task_id, depends_on_task_id, created_at_ms) VALUES (%s, %s, %s);

-- name: tasks.add_assignment
INSERT INTO assignments (task_id, agent_id, assigned_by, active, created_at_ms, updated_at_ms)
VALUES (%s, %s, %s, 1, %s, %s);

-- The cursor's (created_at_ms, seq) of a task listed.
-- name: tasks.seq_of
SELECT seq FROM tasks WHERE id = %s;

-- Tasks in creation order after the cursor (:after_ms NULL: from the first), one statement
-- per filter set; each with its latest run and whether a dependency blocks it (extension
-- list_state: what `task list` shows, in one request per page).
-- name: tasks.page
SELECT t.*, r.status AS run_status, r.attempt AS run_attempt, r.agent_id AS run_agent_id,
       EXISTS (SELECT 1 FROM dependencies d LEFT JOIN tasks u ON u.id = d.depends_on_task_id
               WHERE d.task_id = t.id
               AND (u.id IS NULL OR u.terminal <> 1 OR u.dead_letter_reason IS NOT NULL))
       AS blocked
FROM tasks t
LEFT JOIN LATERAL (SELECT status, attempt, agent_id FROM runs WHERE task_id = t.id
                   ORDER BY attempt DESC LIMIT 1) r ON true
WHERE (%(after_ms)s IS NULL OR t.created_at_ms > %(after_ms)s
       OR (t.created_at_ms = %(after_ms)s AND t.seq > %(after_seq)s))
ORDER BY t.created_at_ms, t.seq LIMIT %(limit)s;

-- name: tasks.page_by_stage
SELECT t.*, r.status AS run_status, r.attempt AS run_attempt, r.agent_id AS run_agent_id,
       EXISTS (SELECT 1 FROM dependencies d LEFT JOIN tasks u ON u.id = d.depends_on_task_id
               WHERE d.task_id = t.id
               AND (u.id IS NULL OR u.terminal <> 1 OR u.dead_letter_reason IS NOT NULL))
       AS blocked
FROM tasks t
LEFT JOIN LATERAL (SELECT status, attempt, agent_id FROM runs WHERE task_id = t.id
                   ORDER BY attempt DESC LIMIT 1) r ON true
WHERE t.stage = %(stage)s
AND (%(after_ms)s IS NULL OR t.created_at_ms > %(after_ms)s
     OR (t.created_at_ms = %(after_ms)s AND t.seq > %(after_seq)s))
ORDER BY t.created_at_ms, t.seq LIMIT %(limit)s;

-- name: tasks.page_by_pipeline
SELECT t.*, r.status AS run_status, r.attempt AS run_attempt, r.agent_id AS run_agent_id,
       EXISTS (SELECT 1 FROM dependencies d LEFT JOIN tasks u ON u.id = d.depends_on_task_id
               WHERE d.task_id = t.id
               AND (u.id IS NULL OR u.terminal <> 1 OR u.dead_letter_reason IS NOT NULL))
       AS blocked
FROM tasks t
LEFT JOIN LATERAL (SELECT status, attempt, agent_id FROM runs WHERE task_id = t.id
                   ORDER BY attempt DESC LIMIT 1) r ON true
WHERE t.pipeline_id = %(pipeline_id)s
AND (%(after_ms)s IS NULL OR t.created_at_ms > %(after_ms)s
     OR (t.created_at_ms = %(after_ms)s AND t.seq > %(after_seq)s))
ORDER BY t.created_at_ms, t.seq LIMIT %(limit)s;

-- name: tasks.page_by_stage_pipeline
SELECT t.*, r.status AS run_status, r.attempt AS run_attempt, r.agent_id AS run_agent_id,
       EXISTS (SELECT 1 FROM dependencies d LEFT JOIN tasks u ON u.id = d.depends_on_task_id
               WHERE d.task_id = t.id
               AND (u.id IS NULL OR u.terminal <> 1 OR u.dead_letter_reason IS NOT NULL))
       AS blocked
FROM tasks t
LEFT JOIN LATERAL (SELECT status, attempt, agent_id FROM runs WHERE task_id = t.id
                   ORDER BY attempt DESC LIMIT 1) r ON true
WHERE t.stage = %(stage)s AND t.pipeline_id = %(pipeline_id)s
AND (%(after_ms)s IS NULL OR t.created_at_ms > %(after_ms)s
     OR (t.created_at_ms = %(after_ms)s AND t.seq > %(after_seq)s))
ORDER BY t.created_at_ms, t.seq LIMIT %(limit)s;

-- Tasks (in a stage, of a pipeline: NULL for any), counted without listing them.
-- name: tasks.count
SELECT count(*) FROM tasks WHERE coalesce(%s, stage) = stage
AND coalesce(%s, pipeline_id) = pipeline_id;

-- name: tasks.latest_run
SELECT * FROM runs WHERE task_id = %s ORDER BY attempt DESC LIMIT 1;

-- name: tasks.runs
SELECT * FROM runs WHERE task_id = %s ORDER BY attempt;

