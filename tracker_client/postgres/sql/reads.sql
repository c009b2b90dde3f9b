-- reads: events and artifacts, listed a page at a time; an artifact recorded (rules/reads.py).

-- name: reads.run_events
SELECT * FROM events WHERE (run_id = %(of)s) AND id > %(after)s AND (%(kind)s IS NULL OR kind = %(kind)s)
ORDER BY id LIMIT %(limit)s;

-- Every event of task :of: its runs' events and its task-level events.
-- name: reads.task_events
SELECT * FROM events
WHERE (run_id IN (SELECT id FROM runs WHERE task_id = %(of)s) OR (run_id IS NULL AND task_id = %(of)s))
AND id > %(after)s AND (%(kind)s IS NULL OR kind = %(kind)s)
ORDER BY id LIMIT %(limit)s;

-- name: reads.run_exists
SELECT task_id FROM runs WHERE id = %s;

-- name: reads.add_artifact
INSERT INTO artifacts (id, task_id, run_id, created_at_ms, kind, uri, sha256, size_bytes, meta)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s);

-- The cursor's (created_at_ms, seq) of an artifact listed.
-- name: reads.artifact_seq
SELECT seq FROM artifacts WHERE id = %s;

-- Artifacts in creation order after the cursor (:after_ms NULL: from the first), one
-- statement per filter set (each keeps its index).
-- name: reads.artifacts_page
SELECT * FROM artifacts
WHERE (%(after_ms)s IS NULL OR created_at_ms > %(after_ms)s
       OR (created_at_ms = %(after_ms)s AND seq > %(after_seq)s))
ORDER BY created_at_ms, seq LIMIT %(limit)s;

-- name: reads.artifacts_page_by_task
SELECT * FROM artifacts WHERE task_id = %(task_id)s
AND (%(after_ms)s IS NULL OR created_at_ms > %(after_ms)s
     OR (created_at_ms = %(after_ms)s AND seq > %(after_seq)s))
ORDER BY created_at_ms, seq LIMIT %(limit)s;

-- name: reads.artifacts_page_by_run
SELECT * FROM artifacts WHERE run_id = %(run_id)s
AND (%(after_ms)s IS NULL OR created_at_ms > %(after_ms)s
     OR (created_at_ms = %(after_ms)s AND seq > %(after_seq)s))
ORDER BY created_at_ms, seq LIMIT %(limit)s;

-- name: reads.artifacts_page_by_task_run
SELECT * FROM artifacts WHERE task_id = %(task_id)s AND run_id = %(run_id)s
AND (%(after_ms)s IS NULL OR created_at_ms > %(after_ms)s
     OR (created_at_ms = %(after_ms)s AND seq > %(after_seq)s))
ORDER BY created_at_ms, seq LIMIT %(limit)s;

