-- pipelines: the pipeline cache's reads (rules/pipelines.py) and the versioned apply
-- (rules/evolve.py; docs/operate/pipelines.md).

-- name: pipelines.get
SELECT id, name, definition, created_at_ms, version FROM pipelines WHERE id = ?;

-- name: pipelines.version
SELECT version FROM pipelines WHERE id = ?;

-- Every pipeline's id and current version, in creation order (the cache reads the
-- definitions it lacks one by one).
-- name: pipelines.heads
SELECT id, version FROM pipelines ORDER BY seq;

-- name: pipelines.by_name
SELECT id, name, definition, created_at_ms, version FROM pipelines WHERE name = ?;

-- One stored version of a pipeline (its name and creation time from the pipeline's row).
-- name: pipelines.at
SELECT p.id, p.name, v.definition, p.created_at_ms, v.version
FROM pipeline_versions v JOIN pipelines p ON p.id = v.pipeline_id
WHERE v.pipeline_id = ? AND v.version = ?;

-- The stage moves of every version after the given one, oldest first.
-- name: pipelines.moves_after
SELECT version, moves FROM pipeline_versions WHERE pipeline_id = ? AND version > ?
ORDER BY version;

-- name: pipelines.add_version
INSERT INTO pipeline_versions (pipeline_id, version, definition, moves, created_at_ms)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (pipeline_id, version) DO NOTHING;

-- Compare-and-set: the current definition moves from version :old to :new.
-- name: pipelines.set_current
UPDATE pipelines SET definition = :definition, version = :new
WHERE id = :pipeline AND version = :old;

-- Per stage: its tasks, its unfinished ones and the leased ones.
-- name: pipelines.stage_counts
SELECT stage, count(*) AS n,
    sum(CASE WHEN terminal = 0 AND dead_letter_reason IS NULL THEN 1 ELSE 0 END) AS unfinished,
    sum(CASE WHEN lease_expires_at_ms > 0 THEN 1 ELSE 0 END) AS leased
FROM tasks WHERE pipeline_id = ? GROUP BY stage;

-- Dead letters by the stage a requeue brings them back to.
-- name: pipelines.dead_letter_from_counts
SELECT dead_letter_from_stage AS stage, count(*) AS n FROM tasks
WHERE pipeline_id = ? AND dead_letter_from_stage IS NOT NULL GROUP BY dead_letter_from_stage;

-- The leased tasks of a pipeline: they finish under the version they were claimed with.
-- name: pipelines.leased
SELECT id, stage, pipeline_version FROM tasks WHERE pipeline_id = ? AND lease_expires_at_ms > 0;

-- name: pipelines.pin_leased
UPDATE tasks SET pipeline_version = :old
WHERE pipeline_id = :pipeline AND lease_expires_at_ms > 0 AND pipeline_version IS NULL;

-- name: pipelines.add_forward
INSERT INTO pipeline_forward (task_id, pipeline_id)
SELECT id, pipeline_id FROM tasks WHERE pipeline_id = ? AND lease_expires_at_ms > 0
ON CONFLICT (task_id) DO NOTHING;

-- A stage's unleased tasks moved to another stage of the new version.
-- name: pipelines.move_stage
UPDATE tasks SET stage = :to, role = :role, terminal = :terminal, pipeline_version = :version,
    task_version = task_version + 1, updated_at_ms = :now
WHERE pipeline_id = :pipeline AND stage = :from AND lease_expires_at_ms = 0;

-- name: pipelines.move_dead_letter_from
UPDATE tasks SET dead_letter_from_stage = :to
WHERE pipeline_id = :pipeline AND dead_letter_from_stage = :from AND lease_expires_at_ms = 0;

-- name: pipelines.move_dead_letter_stage
UPDATE tasks SET dead_letter_stage = :to
WHERE pipeline_id = :pipeline AND dead_letter_stage = :from AND lease_expires_at_ms = 0;

-- A kept stage's unleased tasks under the new version (its role and terminal flag).
-- name: pipelines.restage
UPDATE tasks SET role = :role, terminal = :terminal, pipeline_version = :version
WHERE pipeline_id = :pipeline AND stage = :stage AND lease_expires_at_ms = 0;

-- A waiting task's retry setting that still is the pipeline's old one becomes its new one.
-- name: pipelines.retry_max_attempts
UPDATE tasks SET max_attempts = :new WHERE pipeline_id = :pipeline
    AND lease_expires_at_ms = 0 AND terminal = 0 AND max_attempts IS :old;

-- name: pipelines.retry_retry_delay_ms
UPDATE tasks SET retry_delay_ms = :new WHERE pipeline_id = :pipeline
    AND lease_expires_at_ms = 0 AND terminal = 0 AND retry_delay_ms IS :old;

-- name: pipelines.retry_backoff
UPDATE tasks SET backoff = :new WHERE pipeline_id = :pipeline
    AND lease_expires_at_ms = 0 AND terminal = 0 AND backoff IS :old;

-- name: pipelines.retry_max_retry_delay_ms
UPDATE tasks SET max_retry_delay_ms = :new WHERE pipeline_id = :pipeline
    AND lease_expires_at_ms = 0 AND terminal = 0 AND max_retry_delay_ms IS :old;

-- name: pipelines.retry_dead_letter_stage
UPDATE tasks SET dead_letter_stage = :new WHERE pipeline_id = :pipeline
    AND lease_expires_at_ms = 0 AND terminal = 0 AND dead_letter_stage IS :old;

-- A task brought to the current version after its run (rules/evolve.py forward).
-- name: pipelines.forward_task
UPDATE tasks SET stage = :stage, role = :role, terminal = :terminal, pipeline_version = :version,
    dead_letter_from_stage = :dead_from
WHERE seq = :seq;

-- name: pipelines.set_task_version
-- many
UPDATE tasks SET pipeline_version = ? WHERE seq = ?;

-- name: pipelines.forward_rows
SELECT task_id FROM pipeline_forward ORDER BY task_id LIMIT ?;

-- name: pipelines.forward_done
DELETE FROM pipeline_forward WHERE task_id = ?;
