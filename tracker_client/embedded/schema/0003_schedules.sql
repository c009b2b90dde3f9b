-- Schema version 3: periodic schedules (extension `schedules`).
-- One row per schedule. `next_tick_ms` is the earliest tick not yet fired: a maintenance pass
-- fires the due ticks and advances it (compare-and-set) in the transaction that inserts their
-- tasks, so each tick makes exactly one task however many workers and processes run.

CREATE TABLE schedules (
    name TEXT PRIMARY KEY NOT NULL,
    pipeline_id TEXT NOT NULL,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    title TEXT NOT NULL,
    metadata TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    missed TEXT NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    next_tick_ms INTEGER NOT NULL,
    last_tick_ms INTEGER,
    last_task_id TEXT,
    tasks_created INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX schedules_due ON schedules (next_tick_ms) WHERE paused = 0;
