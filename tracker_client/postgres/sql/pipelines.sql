-- pipelines: the pipeline cache's reads (rules/pipelines.py) and the versioned apply
-- (rules/evolve.py; docs/operate/pipelines.md).

-- name: pipelines.get
SELECT id, name, definition, created_at_ms, version FROM pipelines WHERE id = %s;

-- name: pipelines.version
SELECT version FROM pipelines WHERE id = %s;

-- Every pipeline's id and current version, in creation order (the cache reads the
-- definitions it lacks one by one).
-- name: pipelines.heads
SELECT id, version FROM pipelines ORDER BY seq;

-- name: pipelines.by_name
SELECT id, name, definition, created_at_ms, version FROM pipelines WHERE name = %s;

-- One stored version of a pipeline (its name and creation time from the pipeline's row).
-- name: pipelines.at
SELECT p.id, p.name, v.definition, p.created_at_ms, v.version
FROM pipeline_versions v JOIN pipelines p ON p.id = v.pipeline_id
WHERE v.pipeline_id = %s AND v.version = %s;

-- The stage moves of every version after the given one, oldest first.
-- name: pipelines.moves_after
SELECT version, moves FROM pipeline_versions WHERE pipeline_id = %s AND version > %s
ORDER BY version;

-- name: pipelines.add_version
INSERT INTO pipeline_versions (pipeline_id, version, definition, moves, created_at_ms)
VALUES (%s, %s, %s, %s, %s) ON CONFLICT (pipeline_id, version) DO NOTHING;

-- Compare-and-set: the current definition moves from version old to new.
-- name: pipelines.set_current
UPDATE pipelines SET definition = %(definition)s, version = %(new)s
WHERE id = %(pipeline)s AND version = %(old)s;

-- Per stage: its tasks, its unfinished ones and the leased ones.
-- name: pipelines.stage_counts
SELECT stage, count(*) AS n,
    sum(CASE WHEN terminal = 0 AND dead_letter_reason IS NULL THEN 1 ELSE 0 END) AS unfinished,
    sum(CASE WHEN lease_expires_at_ms > 0 THEN 1 ELSE 0 END) AS leased
FROM tasks WHERE pipeline_id = %s GROUP BY stage;

-- Dead letters by the stage a requeue brings them back to.
-- name: pipelines.dead_letter_from_counts
SELECT dead_letter_from_stage AS stage, count(*) AS n FROM tasks
WHERE pipeline_id = %s AND dead_letter_from_stage IS NOT NULL GROUP BY dead_letter_from_stage;

-- The leased tasks of a pipeline: they finish under the version they were claimed with.
-- name: pipelines.leased
SELECT id, stage, pipeline_version FROM tasks WHERE pipeline_id = %s AND lease_expires_at_ms > 0;

-- name: pipelines.pin_leased
UPDATE tasks SET pipeline_version = %(old)s
WHERE pipeline_id = %(pipeline)s AND lease_expires_at_ms > 0 AND pipeline_version IS NULL;

-- name: pipelines.add_forward
INSERT INTO pipeline_forward (task_id, pipeline_id)
SELECT id, pipeline_id FROM tasks WHERE pipeline_id = %s AND lease_expires_at_ms > 0
ON CONFLICT (task_id) DO NOTHING;

-- A stage's unleased tasks moved to another stage of the new version.
-- name: pipelines.move_stage
UPDATE tasks SET stage = %(to)s, role = %(role)s, terminal = %(terminal)s, pipeline_version = %(version)s,
    task_version = task_version + 1, updated_at_ms = %(now)s
WHERE pipeline_id = %(pipeline)s AND stage = %(from)s AND lease_expires_at_ms = 0;

-- name: pipelines.move_dead_letter_from
UPDATE tasks SET dead_letter_from_stage = %(to)s
WHERE pipeline_id = %(pipeline)s AND dead_letter_from_stage = %(from)s AND lease_expires_at_ms = 0;

-- name: pipelines.move_dead_letter_stage
UPDATE tasks SET dead_letter_stage = %(to)s
WHERE pipeline_id = %(pipeline)s AND dead_letter_stage = %(from)s AND lease_expires_at_ms = 0;

-- A kept stage's unleased tasks under the new version (its role and terminal flag).
-- name: pipelines.restage
UPDATE tasks SET role = %(role)s, terminal = %(terminal)s, pipeline_version = %(version)s
WHERE pipeline_id = %(pipeline)s AND stage = %(stage)s AND lease_expires_at_ms = 0;

-- A waiting task's retry setting that still is the pipeline's old one becomes its new one.
-- name: pipelines.retry_max_attempts
UPDATE tasks SET max_attempts = %(new)s WHERE pipeline_id = %(pipeline)s
    AND lease_expires_at_ms = 0 AND terminal = 0 AND max_attempts IS NOT DISTINCT FROM %(old)s;

-- name: pipelines.retry_retry_delay_ms
UPDATE tasks SET retry_delay_ms = %(new)s WHERE pipeline_id = %(pipeline)s
    AND lease_expires_at_ms = 0 AND terminal = 0 AND retry_delay_ms IS NOT DISTINCT FROM %(old)s;

-- name: pipelines.retry_backoff
UPDATE tasks SET backoff = %(new)s WHERE pipeline_id = %(pipeline)s
    AND lease_expires_at_ms = 0 AND terminal = 0 AND backoff IS NOT DISTINCT FROM %(old)s;

-- name: pipelines.retry_max_retry_delay_ms
UPDATE tasks SET max_retry_delay_ms = %(new)s WHERE pipeline_id = %(pipeline)s
    AND lease_expires_at_ms = 0 AND terminal = 0 AND max_retry_delay_ms IS NOT DISTINCT FROM %(old)s;

-- name: pipelines.retry_dead_letter_stage
UPDATE tasks SET dead_letter_stage = %(new)s WHERE pipeline_id = %(pipeline)s
    AND lease_expires_at_ms = 0 AND terminal = 0 AND dead_letter_stage IS NOT DISTINCT FROM %(old)s;

-- A task brought to the current version after its run (rules/evolve.py forward).
-- name: pipelines.forward_task
UPDATE tasks SET stage = %(stage)s, role = %(role)s, terminal = %(terminal)s,
    pipeline_version = %(version)s, dead_letter_from_stage = %(dead_from)s
WHERE seq = %(seq)s;

-- name: pipelines.set_task_version
UPDATE tasks SET pipeline_version = %s WHERE seq = %s;

-- name: pipelines.forward_rows
SELECT task_id FROM pipeline_forward ORDER BY task_id LIMIT %s;

-- name: pipelines.forward_done
DELETE FROM pipeline_forward WHERE task_id = %s;
