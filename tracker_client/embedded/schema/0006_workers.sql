-- Schema version 6: the live worker registry (extension `workers`, `backlog-worker workers`).
-- One row per worker process, upserted by the worker at start and at every refresh
-- (`last_seen_at_ms` is the rail's clock at that upsert). The state is not stored: it is read
-- from `stopping` (a clean shutdown said goodbye) and `last_seen_at_ms + lost_after_ms` against
-- the rail's clock. `roles` and `run_ids` are JSON arrays; `run_ids` (the runs the worker held
-- at its last refresh, NULL when it did not say) tells workers sharing one agent id apart.
-- Rows silent for 7 days are forgotten by the next registration.

CREATE TABLE workers (
    id TEXT PRIMARY KEY NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    version TEXT NOT NULL,
    roles TEXT NOT NULL,
    slots INTEGER NOT NULL,
    agent_id TEXT NOT NULL,
    run_ids TEXT,
    started_at_ms INTEGER NOT NULL,
    registered_at_ms INTEGER NOT NULL,
    last_seen_at_ms INTEGER NOT NULL,
    lost_after_ms INTEGER NOT NULL,
    stopping INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX workers_seen ON workers (last_seen_at_ms);
