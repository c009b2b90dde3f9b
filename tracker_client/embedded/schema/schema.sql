-- The embedded (SQLite) rail's schema as it is now: what a new rail file is created from, in one
-- step (tracker_client/embedded/migrate.py), recorded at its level (PRAGMA user_version).
--
-- An existing rail is brought here by the numbered migrations beside this file (0001_initial.sql
-- ... 0009_wakes.sql), which stay as they were written: history, each a diff. A change to
-- the schema is a new numbered migration AND the same change here; tests/embedded/test_schema.py
-- proves this file equals every migration applied to an empty file (sqlite_master, normalised).
--
-- Columns after the NullTickets ones on `tasks` are denormalised for the claim query: the current
-- stage's role and terminal flag, the lease's expiry (0 = none), whether the task has
-- dependencies, and the active assignee. They are kept in step by every write that changes them.
-- A task holds at most one lease, so the lease lives on the task row (only its token's SHA-256).

CREATE TABLE pipelines (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    definition TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    -- Schema 11: the current definition's version (pipeline_versions below).
    version INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    pipeline_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    priority INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    task_version INTEGER NOT NULL DEFAULT 1,
    next_eligible_at_ms INTEGER NOT NULL DEFAULT 0,
    retry_delay_ms INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER,
    dead_letter_stage TEXT,
    dead_letter_reason TEXT,
    dead_letter_from_stage TEXT,
    backoff TEXT NOT NULL DEFAULT 'constant',
    max_retry_delay_ms INTEGER,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    concurrency_key TEXT,
    expires_at_ms INTEGER,
    max_stale_attempts INTEGER,
    failed_attempts INTEGER NOT NULL DEFAULT 0,
    stale_streak INTEGER NOT NULL DEFAULT 0,
    last_attempt INTEGER NOT NULL DEFAULT 0,
    role TEXT,
    terminal INTEGER NOT NULL DEFAULT 0,
    lease_expires_at_ms INTEGER NOT NULL DEFAULT 0,
    has_deps INTEGER NOT NULL DEFAULT 0,
    assignee TEXT,
    -- The task's lease (at most one): lease_expires_at_ms > 0 while one is held.
    lease_id TEXT,
    lease_run_id TEXT,
    lease_token_sha256 TEXT,
    lease_ttl_ms INTEGER,
    -- Delayed tasks (schema 2): the time a delayed task was scheduled for (NULL = created due).
    -- The claim scan uses next_eligible_at_ms (set to run_at_ms at creation); run_at_ms tells
    -- `queue` and `task show` a scheduled task from one waiting on a retry delay.
    run_at_ms INTEGER,
    -- Dedupe keys (schema 2): a create carrying a key answers the id of a task with the same
    -- key that is still waiting or running instead of creating one; dedupe_window_ms: how long
    -- after that task finished the key still dedupes (NULL/0 = not at all), counted from the
    -- finished task's updated_at_ms.
    dedupe_key TEXT,
    dedupe_window_ms INTEGER,
    -- Subtasks (schema 7): the task that spawned this one (NULL for a top-level task); a cancel
    -- walks it down to the unfinished descendants. Not a foreign key: a parent may be purged
    -- before its children.
    parent_id TEXT,
    -- Checkpoints (schema 7): 1 once any run of the task wrote one, so a claim reads `runs`
    -- for the previous checkpoint only then.
    checkpointed INTEGER NOT NULL DEFAULT 0,
    -- Budgets (schema 10; docs/operate/budgets.md): the task's own settings (JSON; NULL:
    -- none), the cost its runs reported (summed), its entries into stages on a loop (JSON),
    -- where a requeue restarted the count (JSON; NULL: from creation) and the figures of the
    -- budget that dead-lettered it (NULL: none).
    budgets TEXT,
    spent_usd REAL NOT NULL DEFAULT 0,
    spent_tokens INTEGER NOT NULL DEFAULT 0,
    visits TEXT,
    budget_base TEXT,
    budget_stop TEXT,
    -- Pipeline versions (schema 11): the version of its pipeline the task is under (NULL: the
    -- current one); see pipeline_versions below.
    pipeline_version INTEGER
);

-- The claim scan: one role, best first, skipping leased/delayed rows inside the index.
CREATE INDEX tasks_claim ON tasks (role, priority DESC, seq, next_eligible_at_ms, lease_expires_at_ms)
    WHERE dead_letter_reason IS NULL AND terminal = 0;
CREATE INDEX tasks_order ON tasks (created_at_ms, seq);
CREATE INDEX tasks_deadline ON tasks (expires_at_ms)
    WHERE expires_at_ms IS NOT NULL AND dead_letter_reason IS NULL AND terminal = 0;
CREATE INDEX tasks_ckey ON tasks (concurrency_key) WHERE concurrency_key IS NOT NULL;
CREATE INDEX tasks_pipeline ON tasks (pipeline_id);
CREATE INDEX tasks_leased ON tasks (lease_expires_at_ms) WHERE lease_expires_at_ms > 0;

-- The dedupe look-up (schema 2). Not UNIQUE on purpose: a finished task can be moved back into
-- play (a transition out of a terminal stage, a dead letter requeued) while a newer task holds
-- the same key, and that move must not fail; atomicity comes from the create's BEGIN IMMEDIATE.
CREATE INDEX tasks_dedupe ON tasks (dedupe_key, seq) WHERE dedupe_key IS NOT NULL;
CREATE INDEX tasks_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;

-- Keyed by id without a rowid: one b-tree less to write per claim.
CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    agent_role TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    ended_at_ms INTEGER,
    error TEXT,
    usage TEXT,
    -- The run's latest checkpoint (schema 7): compact JSON, at most 64 KiB.
    checkpoint TEXT,
    UNIQUE (task_id, attempt)
) WITHOUT ROWID;

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    run_id TEXT,
    ts_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX events_run ON events (run_id, id);
-- A task's run events are found through its runs; only task-level events need this index.
CREATE INDEX events_task_level ON events (task_id, id) WHERE run_id IS NULL;

CREATE TABLE dependencies (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    depends_on_task_id TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (task_id, depends_on_task_id)
);
CREATE INDEX dependencies_upstream ON dependencies (depends_on_task_id);

CREATE TABLE assignments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    assigned_by TEXT,
    active INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (task_id, agent_id)
);

CREATE TABLE artifacts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    task_id TEXT,
    run_id TEXT,
    created_at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    uri TEXT NOT NULL,
    sha256 TEXT,
    size_bytes INTEGER,
    meta TEXT NOT NULL
);
CREATE INDEX artifacts_order ON artifacts (created_at_ms, seq);
CREATE INDEX artifacts_task ON artifacts (task_id, created_at_ms, seq);
CREATE INDEX artifacts_run ON artifacts (run_id, created_at_ms, seq);

CREATE TABLE idempotency (
    key TEXT NOT NULL,
    operation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (key, operation)
) WITHOUT ROWID;
CREATE INDEX idempotency_age ON idempotency (created_at_ms);

CREATE TABLE store (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (namespace, key)
);

CREATE VIRTUAL TABLE store_fts USING fts5 (
    namespace, key, value, content = 'store', content_rowid = 'id'
);

CREATE TRIGGER store_ai AFTER INSERT ON store BEGIN
    INSERT INTO store_fts (rowid, namespace, key, value)
    VALUES (new.id, new.namespace, new.key, new.value);
END;

CREATE TRIGGER store_ad AFTER DELETE ON store BEGIN
    INSERT INTO store_fts (store_fts, rowid, namespace, key, value)
    VALUES ('delete', old.id, old.namespace, old.key, old.value);
END;

CREATE TRIGGER store_au AFTER UPDATE ON store BEGIN
    INSERT INTO store_fts (store_fts, rowid, namespace, key, value)
    VALUES ('delete', old.id, old.namespace, old.key, old.value);
    INSERT INTO store_fts (rowid, namespace, key, value)
    VALUES (new.id, new.namespace, new.key, new.value);
END;

-- Schema 3: periodic schedules (extension `schedules`).
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

-- Schema 4: fleet-wide rate limits and concurrency caps per role (extension
-- `rate_limits`). One row per limited role. The rate is a token bucket of `rate_count` tokens
-- refilled over `period_ms`; `tokens` as of `refilled_at_ms` is updated by each claim in the
-- claim's own write transaction, so every worker process sees and spends the same tokens.
-- `max_running`: claims of the role are refused while that many of its tasks are leased.

CREATE TABLE rate_limits (
    role TEXT PRIMARY KEY NOT NULL,
    rate_count INTEGER,
    period_ms INTEGER,
    max_running INTEGER,
    tokens REAL NOT NULL DEFAULT 0,
    refilled_at_ms INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Schema 5: OTLP span storage (POST /v1/traces, extension `spans`;
-- docs/reference/http-api.md).
-- One `span_batches` row per ingest request: an OTLP/JSON document is parsed into `spans`
-- (stored = 'json', accepted = its span count); any other content type keeps the body as is
-- (stored = 'blob', accepted = 0). A span is linked to its task and run by the attributes
-- nulltickets.task_id / nulltickets.run_id (a run's task filled in from `runs` when only the run
-- is named); neither is a foreign key: spans may name a task of no rail, and are kept until
-- their task is purged (unlinked ones and blobs until they are older than the retention).

CREATE TABLE span_batches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at_ms INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    stored TEXT NOT NULL CHECK (stored IN ('json', 'blob')),
    blob BLOB,
    accepted INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX span_batches_received ON span_batches (received_at_ms);

CREATE TABLE spans (
    id INTEGER PRIMARY KEY,
    batch_id INTEGER NOT NULL REFERENCES span_batches (id),
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    parent_span_id TEXT,
    name TEXT NOT NULL,
    kind INTEGER,
    start_time_unix_nano INTEGER,
    end_time_unix_nano INTEGER,
    status_code INTEGER,
    status_message TEXT,
    service_name TEXT,
    task_id TEXT,
    run_id TEXT,
    attributes TEXT NOT NULL DEFAULT '{}'
);

CREATE INDEX spans_batch ON spans (batch_id);
CREATE INDEX spans_task ON spans (task_id, start_time_unix_nano) WHERE task_id IS NOT NULL;
CREATE INDEX spans_run ON spans (run_id, start_time_unix_nano) WHERE run_id IS NOT NULL;

-- Schema 6: the live worker registry (extension `workers`, `backlog-worker workers`).
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

-- Schema 8: the rail's secrets.
-- `rail_secrets`: named random keys made once per rail. `lease_token_key` (32 bytes, hex) derives
-- the lease token of a claim made with an idempotency key, so a replay of that claim answers the
-- same token while only its SHA-256 is stored (tracker_client/rules/leasekeys.py). The row is
-- made (from Python's `secrets`) on the rail's first keyed claim. Never logged or answered, and
-- not copied by `rail copy` (a copy makes its own).

CREATE TABLE rail_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- Schema 9: the cross-process wake counter.
-- `wakes`: one row (made by the first write that bumps it) whose `n` every write that may make
-- work claimable or revoke a lease bumps inside its own transaction (the rail's rule:
-- tracker_client/rules/engine.py `wakes_waiters`). An idle waiter of another process that sees
-- `PRAGMA data_version` move reads `n` and sleeps on when it did not move: a heartbeat or an event
-- wakes nobody. Releases before this one do not bump it; their commits are noticed by the
-- waiters' once-a-second safety look (tracker_client/embedded/engine.py).

CREATE TABLE wakes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);

-- Schema 11: versioned pipeline definitions (`pipeline apply`; docs/operate/pipelines.md).
-- `pipelines.definition` stays the current definition (what a release before this one reads) and
-- `pipelines.version` its number. `pipeline_versions` keeps every version's definition and the
-- stage moves it was applied with (JSON: old -> new), made by the first apply that changes a
-- pipeline (its version 1 then) and by each later one. A task leased while an apply changes its
-- pipeline keeps its version and finishes under it; `pipeline_forward` lists those tasks, so
-- that one whose run ended where the rules could not bring it to the current version (an older
-- worker, a lost lease) is brought there by the next maintenance pass.

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
