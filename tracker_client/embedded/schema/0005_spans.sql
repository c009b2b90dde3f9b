-- Schema version 5: OTLP span storage (POST /v1/traces, extension `spans`;
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
