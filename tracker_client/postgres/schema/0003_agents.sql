-- Schema version 3 of the PostgreSQL rail: the embedded rail's migration 7 (the agent
-- extensions: subtasks and checkpoints), in PostgreSQL types.
-- `tasks.parent_id`: the task that spawned this one (NULL for a top-level task); a cancel walks
-- it down to the unfinished descendants. Not a foreign key: a parent may be purged first.
-- `runs.checkpoint`: the run's latest checkpoint (compact JSON, at most 64 KiB);
-- `tasks.checkpointed` = 1 once any run of the task wrote one, so a claim reads `runs` for the
-- previous checkpoint only then.

ALTER TABLE tasks ADD COLUMN parent_id TEXT;
ALTER TABLE tasks ADD COLUMN checkpointed BIGINT NOT NULL DEFAULT 0;
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;

ALTER TABLE runs ADD COLUMN checkpoint TEXT;
