-- spans: OTLP ingest and a task's spans (rules/spans.py; postgres/spans.py runs the insert
-- once per span with psycopg's executemany).

-- name: spans.batch
-- returning: id
INSERT INTO span_batches (received_at_ms, content_type, stored, blob, accepted)
VALUES (%s, %s, %s, %s, %s) RETURNING id;

-- name: spans.run_task
SELECT task_id FROM runs WHERE id = %s;

-- One span (run once per span of a batch).
-- name: spans.insert
INSERT INTO spans (batch_id, trace_id, span_id, parent_span_id, name, kind,
    start_time_unix_nano, end_time_unix_nano, status_code, status_message, service_name,
    task_id, run_id, attributes)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);

-- The task's spans (only :run_id's when given), by start time, those without one last.
-- name: spans.of_task
SELECT batch_id, trace_id, span_id, parent_span_id, name, kind, start_time_unix_nano,
    end_time_unix_nano, status_code, status_message, service_name, task_id, run_id, attributes
FROM spans WHERE task_id = %(task_id)s AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
ORDER BY start_time_unix_nano IS NULL, start_time_unix_nano, id LIMIT %(limit)s;
