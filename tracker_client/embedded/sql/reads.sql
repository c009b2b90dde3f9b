-- reads: events and artifacts, listed a page at a time; an artifact recorded (rules/reads.py).

-- name: reads.run_events
SELECT * FROM events WHERE (run_id = :of) AND id > :after AND (:kind IS NULL OR kind = :kind)
ORDER BY id LIMIT :limit;

-- Every event of task :of: its runs' events and its task-level events.
-- name: reads.task_events
SELECT * FROM events
WHERE (run_id IN (SELECT id FROM runs WHERE task_id = :of) OR (run_id IS NULL AND task_id = :of))
AND id > :after AND (:kind IS NULL OR kind = :kind)
ORDER BY id LIMIT :limit;

-- name: reads.run_exists
SELECT task_id FROM runs WHERE id = ?;

-- name: reads.add_artifact
INSERT INTO artifacts (id, task_id, run_id, created_at_ms, kind, uri, sha256, size_bytes, meta)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- The cursor's (created_at_ms, seq) of an artifact listed.
-- name: reads.artifact_seq
SELECT seq FROM artifacts WHERE id = ?;

-- Artifacts in creation order after the cursor (:after_ms NULL: from the first), one
-- statement per filter set (each keeps its index).
-- name: reads.artifacts_page
SELECT * FROM artifacts
WHERE (:after_ms IS NULL OR created_at_ms > :after_ms
       OR (created_at_ms = :after_ms AND seq > :after_seq))
ORDER BY created_at_ms, seq LIMIT :limit;

-- name: reads.artifacts_page_by_task
SELECT * FROM artifacts WHERE task_id = :task_id
AND (:after_ms IS NULL OR created_at_ms > :after_ms
     OR (created_at_ms = :after_ms AND seq > :after_seq))
ORDER BY created_at_ms, seq LIMIT :limit;

-- name: reads.artifacts_page_by_run
SELECT * FROM artifacts WHERE run_id = :run_id
AND (:after_ms IS NULL OR created_at_ms > :after_ms
     OR (created_at_ms = :after_ms AND seq > :after_seq))
ORDER BY created_at_ms, seq LIMIT :limit;

-- name: reads.artifacts_page_by_task_run
SELECT * FROM artifacts WHERE task_id = :task_id AND run_id = :run_id
AND (:after_ms IS NULL OR created_at_ms > :after_ms
     OR (created_at_ms = :after_ms AND seq > :after_seq))
ORDER BY created_at_ms, seq LIMIT :limit;
