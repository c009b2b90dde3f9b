-- Schema version 1 of the embedded tracker.
-- Columns after the NullTickets ones on `tasks` are denormalised for the claim query: the current
-- stage's role and terminal flag, the lease's expiry (0 = none), whether the task has
-- dependencies, and the active assignee. They are kept in step by every write that changes them.
-- A task holds at most one lease, so the lease lives on the task row (only its token's SHA-256).

CREATE TABLE pipelines (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    definition TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
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
    lease_ttl_ms INTEGER
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
