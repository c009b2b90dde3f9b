-- Schema version 11: versioned pipeline definitions (`pipeline apply`; docs/operate/pipelines.md).
-- additive
-- `pipelines.definition` stays the CURRENT definition (what a release before this one reads) and
-- `pipelines.version` its number (1 for every pipeline made before). `pipeline_versions` keeps
-- every version's definition and the stage moves it was applied with (JSON: old -> new), made
-- by the first apply that changes a pipeline (its version 1 then) and by each later one.
-- `tasks.pipeline_version`: the version a task is under (NULL: the current one; a task made by
-- a release before this one). A task leased while an apply changes its pipeline keeps its
-- version and finishes under it; `pipeline_forward` lists those tasks, so that one whose run
-- ended where the rules could not bring it to the current version (an older worker, a lost
-- lease) is brought there by the next maintenance pass.

ALTER TABLE pipelines ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

ALTER TABLE tasks ADD COLUMN pipeline_version INTEGER;

CREATE TABLE pipeline_versions (
    pipeline_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    definition TEXT NOT NULL,
    moves TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (pipeline_id, version)
) WITHOUT ROWID;

CREATE TABLE pipeline_forward (
    task_id TEXT PRIMARY KEY NOT NULL,
    pipeline_id TEXT NOT NULL
) WITHOUT ROWID;
