-- Schema version 6 of the PostgreSQL rail: the hot path's functions (tracker_client/postgres/hot.py).
--
-- bw_transition: a lease's plain transition (no wait_for) in one statement, so BEGIN, the write
-- lock, this call, the wake-up NOTIFY and COMMIT travel in one round trip. The caller has
-- worked out the move from the task's pipeline and the stage it was claimed in (the rules stay
-- the embedded rail's, in Python); this function checks, with the task's row locked, that the
-- lease is live and fenced by this token's SHA-256, that the task is still in that pipeline and
-- stage (and version, when given), and that the idempotency key is new, then writes what
-- tracker_client/rules/runs.py transition() writes: the run completed, the task moved and
-- its lease cleared, the transition event, the idempotency record. Anything else (a lost
-- lease, a replayed key, a moved task) answers FALSE having written nothing, and the caller
-- runs the embedded transition, which answers it exactly (the error, the replay).
CREATE FUNCTION bw_transition(
    p_run TEXT, p_token TEXT, p_pipeline TEXT, p_stage TEXT, p_version BIGINT, p_to TEXT,
    p_role TEXT, p_terminal BIGINT, p_usage TEXT, p_event TEXT, p_now BIGINT, p_key TEXT,
    p_fp TEXT, p_result TEXT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    t_seq BIGINT;
    t_id TEXT;
BEGIN
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM idempotency WHERE key = p_key AND operation = 'transition'
    ) THEN
        RETURN FALSE;
    END IF;
    SELECT t.seq, t.id INTO t_seq, t_id
    FROM runs r JOIN tasks t ON t.id = r.task_id
    WHERE r.id = p_run AND t.lease_run_id = p_run AND t.lease_token_sha256 = p_token
      AND t.lease_expires_at_ms > p_now AND t.pipeline_id = p_pipeline AND t.stage = p_stage
      AND (p_version IS NULL OR t.task_version = p_version)
    FOR NO KEY UPDATE OF t;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    UPDATE runs SET status = 'completed', ended_at_ms = p_now, usage = p_usage WHERE id = p_run;
    UPDATE tasks SET stage = p_to, task_version = task_version + 1, dead_letter_reason = NULL,
        next_eligible_at_ms = 0, updated_at_ms = p_now, role = p_role, terminal = p_terminal,
        stale_streak = 0, lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL,
        lease_token_sha256 = NULL, lease_ttl_ms = NULL
    WHERE seq = t_seq;
    INSERT INTO events (task_id, run_id, ts_ms, kind, data)
    VALUES (t_id, p_run, p_now, 'transition', p_event);
    IF p_key IS NOT NULL THEN
        INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
        VALUES (p_key, 'transition', p_fp, p_result, p_now);
    END IF;
    RETURN TRUE;
END
$$;
