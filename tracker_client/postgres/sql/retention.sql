-- retention: purging finished tasks in small batches (rules/retention.py). PostgreSQL's
-- autovacuum gives freed space back by itself: no vacuum statements here.
--
-- Purgeable: finished (terminal or dead-lettered), no live lease, last updated before
-- :cutoff, of :pipeline when given, and no unfinished task depends on it. Id lists are one
-- JSON array parameter (:ids).

-- name: retention.candidates
SELECT t.id, t.created_at_ms, t.seq FROM tasks t
WHERE t.created_at_ms < %(cutoff)s
    AND (t.created_at_ms, t.seq) > (%(after_ms)s, %(after_seq)s)
    AND (t.terminal = 1 OR t.dead_letter_reason IS NOT NULL)
    AND t.lease_expires_at_ms <= %(now)s AND t.updated_at_ms < %(cutoff)s
    AND (%(pipeline)s::text IS NULL OR t.pipeline_id = %(pipeline)s)
    AND NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks w ON w.id = d.task_id
        WHERE d.depends_on_task_id = t.id AND w.terminal = 0 AND w.dead_letter_reason IS NULL)
ORDER BY t.created_at_ms, t.seq LIMIT %(limit)s;

-- name: retention.still_purgeable
SELECT t.id FROM tasks t
WHERE t.id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
    AND (t.terminal = 1 OR t.dead_letter_reason IS NOT NULL)
    AND t.lease_expires_at_ms <= %(now)s AND t.updated_at_ms < %(cutoff)s
    AND (%(pipeline)s::text IS NULL OR t.pipeline_id = %(pipeline)s)
    AND NOT EXISTS (SELECT 1 FROM dependencies d JOIN tasks w ON w.id = d.task_id
        WHERE d.depends_on_task_id = t.id AND w.terminal = 0 AND w.dead_letter_reason IS NULL);

-- name: retention.count_runs
SELECT count(*) FROM runs WHERE task_id IN (SELECT jsonb_array_elements_text(%s::jsonb));

-- name: retention.count_events
SELECT count(*) FROM events WHERE task_id IN (SELECT jsonb_array_elements_text(%s::jsonb));

-- name: retention.count_artifacts
SELECT count(*) FROM artifacts
WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
    OR run_id IN (SELECT id FROM runs
        WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: retention.delete_spans
DELETE FROM spans WHERE id IN (SELECT id FROM spans
    WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)) LIMIT %(limit)s);

-- name: retention.delete_events
DELETE FROM events WHERE id IN (
    SELECT id FROM events WHERE run_id IN (SELECT id FROM runs
        WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)))
    UNION ALL
    SELECT id FROM events WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
        AND run_id IS NULL
    LIMIT %(limit)s);

-- name: retention.delete_artifacts
DELETE FROM artifacts
WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
    OR run_id IN (SELECT id FROM runs
        WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)));

-- name: retention.delete_runs
DELETE FROM runs WHERE task_id IN (SELECT jsonb_array_elements_text(%s::jsonb));

-- name: retention.delete_dependencies
DELETE FROM dependencies
WHERE task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
    OR depends_on_task_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb));

-- name: retention.delete_assignments
DELETE FROM assignments WHERE task_id IN (SELECT jsonb_array_elements_text(%s::jsonb));

-- name: retention.delete_tasks
DELETE FROM tasks WHERE id IN (SELECT jsonb_array_elements_text(%s::jsonb));

-- Idempotency records older than the cutoff, at most :limit.
-- name: retention.drop_keys
DELETE FROM idempotency WHERE (key, operation) IN (SELECT key, operation
    FROM idempotency WHERE created_at_ms < %s LIMIT %s);

-- Spans received before the cutoff that no task of the rail holds.
-- name: retention.unlinked_spans
DELETE FROM spans WHERE id IN (SELECT s.id FROM span_batches b JOIN spans s
    ON s.batch_id = b.id WHERE b.received_at_ms < %s AND (s.task_id IS NULL OR NOT EXISTS
    (SELECT 1 FROM tasks t WHERE t.id = s.task_id)) LIMIT %s);

-- Blobs, and JSON batches whose spans are all gone, received before the cutoff.
-- name: retention.empty_batches
DELETE FROM span_batches WHERE id IN (SELECT b.id FROM span_batches b
    WHERE b.received_at_ms < %s AND (b.stored = 'blob' OR NOT EXISTS
    (SELECT 1 FROM spans s WHERE s.batch_id = b.id)) LIMIT %s);
