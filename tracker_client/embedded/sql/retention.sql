-- retention: purging finished tasks in small batches, shrinking the file (rules/retention.py).
--
-- Purgeable: finished (terminal or dead-lettered), no live lease, last updated before
-- :cutoff, of :pipeline when given, and no unfinished task depends on it. Id lists are one
-- JSON array parameter (:ids).

-- name: retention.candidates
SELECT t.id, t.created_at_ms, t.seq FROM tasks t
WHERE t.created_at_ms < :cutoff AND (t.created_at_ms, t.seq) > (:after_ms, :after_seq)
    AND (t.terminal = 1 OR t.dead_letter_reason IS NOT NULL)
    AND t.lease_expires_at_ms <= :now AND t.updated_at_ms < :cutoff
    AND (:pipeline IS NULL OR t.pipeline_id = :pipeline)
    AND NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks w ON w.id = d.task_id
        WHERE d.depends_on_task_id = t.id AND w.terminal = 0 AND w.dead_letter_reason IS NULL)
ORDER BY t.created_at_ms, t.seq LIMIT :limit;

-- name: retention.still_purgeable
SELECT t.id FROM tasks t
WHERE t.id IN (SELECT value FROM json_each(:ids))
    AND (t.terminal = 1 OR t.dead_letter_reason IS NOT NULL)
    AND t.lease_expires_at_ms <= :now AND t.updated_at_ms < :cutoff
    AND (:pipeline IS NULL OR t.pipeline_id = :pipeline)
    AND NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks w ON w.id = d.task_id
        WHERE d.depends_on_task_id = t.id AND w.terminal = 0 AND w.dead_letter_reason IS NULL);

-- name: retention.count_runs
SELECT count(*) FROM runs WHERE task_id IN (SELECT value FROM json_each(?));

-- name: retention.count_events
SELECT count(*) FROM events WHERE task_id IN (SELECT value FROM json_each(?));

-- name: retention.count_artifacts
SELECT count(*) FROM artifacts
WHERE task_id IN (SELECT value FROM json_each(:ids))
    OR run_id IN (SELECT id FROM runs WHERE task_id IN (SELECT value FROM json_each(:ids)));

-- name: retention.delete_spans
DELETE FROM spans WHERE id IN (SELECT id FROM spans
    WHERE task_id IN (SELECT value FROM json_each(:ids)) LIMIT :limit);

-- name: retention.delete_events
DELETE FROM events WHERE id IN (
    SELECT id FROM events WHERE run_id IN (SELECT id FROM runs
        WHERE task_id IN (SELECT value FROM json_each(:ids)))
    UNION ALL
    SELECT id FROM events WHERE task_id IN (SELECT value FROM json_each(:ids))
        AND run_id IS NULL
    LIMIT :limit);

-- name: retention.delete_artifacts
DELETE FROM artifacts
WHERE task_id IN (SELECT value FROM json_each(:ids))
    OR run_id IN (SELECT id FROM runs WHERE task_id IN (SELECT value FROM json_each(:ids)));

-- name: retention.delete_runs
DELETE FROM runs WHERE task_id IN (SELECT value FROM json_each(?));

-- name: retention.delete_dependencies
DELETE FROM dependencies
WHERE task_id IN (SELECT value FROM json_each(:ids))
    OR depends_on_task_id IN (SELECT value FROM json_each(:ids));

-- name: retention.delete_assignments
DELETE FROM assignments WHERE task_id IN (SELECT value FROM json_each(?));

-- name: retention.delete_tasks
DELETE FROM tasks WHERE id IN (SELECT value FROM json_each(?));

-- Idempotency records older than the cutoff, at most :limit.
-- name: retention.drop_keys
DELETE FROM idempotency WHERE (key, operation) IN (SELECT key, operation
    FROM idempotency WHERE created_at_ms < ? LIMIT ?);

-- Spans received before the cutoff that no task of the rail holds.
-- name: retention.unlinked_spans
DELETE FROM spans WHERE id IN (SELECT s.id FROM span_batches b JOIN spans s
    ON s.batch_id = b.id WHERE b.received_at_ms < ? AND (s.task_id IS NULL OR NOT EXISTS
    (SELECT 1 FROM tasks t WHERE t.id = s.task_id)) LIMIT ?);

-- Blobs, and JSON batches whose spans are all gone, received before the cutoff.
-- name: retention.empty_batches
DELETE FROM span_batches WHERE id IN (SELECT b.id FROM span_batches b
    WHERE b.received_at_ms < ? AND (b.stored = 'blob' OR NOT EXISTS
    (SELECT 1 FROM spans s WHERE s.batch_id = b.id)) LIMIT ?);

-- Giving freed pages back to the file system: SQLite's own (PostgreSQL's autovacuum does it
-- there, so that engine has none of these and the purge skips the step).
-- name: retention.auto_vacuum
-- only: sqlite
PRAGMA auto_vacuum;

-- name: retention.free_pages
-- only: sqlite
PRAGMA freelist_count;

-- One step frees one page.
-- name: retention.vacuum_page
-- only: sqlite
PRAGMA incremental_vacuum(1);
