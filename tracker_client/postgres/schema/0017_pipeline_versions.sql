-- Schema version 17 of the PostgreSQL rail: versioned pipeline definitions (embedded schema 11;
-- `pipeline apply`, docs/operate/pipelines.md).
-- additive
-- `pipelines.definition` stays the CURRENT definition (what a release before this one reads) and
-- `pipelines.version` its number (1 for every pipeline made before). `pipeline_versions` keeps
-- every version's definition and the stage moves it was applied with (JSON: old -> new).
-- `tasks.pipeline_version`: the version a task is under (NULL: the current one). A task leased
-- while an apply changes its pipeline keeps its version and finishes under it;
-- `pipeline_forward` lists those tasks for the maintenance pass that brings them forward.
ALTER TABLE pipelines ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

ALTER TABLE tasks ADD COLUMN pipeline_version BIGINT;

CREATE TABLE pipeline_versions (
    pipeline_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    definition TEXT NOT NULL,
    moves TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (pipeline_id, version)
);

CREATE TABLE pipeline_forward (
    task_id TEXT PRIMARY KEY,
    pipeline_id TEXT NOT NULL
);
