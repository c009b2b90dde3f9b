-- Schema version 8 of the PostgreSQL rail: finish_many's plain transitions in one statement
-- (tracker_client/postgres/batch.py).
--
-- bw_move is bw_transition (schema 6) with the idempotency record's operation named by the
-- caller: an item of finish_many is keyed as a finish is. bw_finish_many runs it for each item
-- of a batch and answers, per item, whether it was written; an item it answers FALSE for wrote
-- nothing (bw_move checks everything before it writes) and the caller hands it to the embedded
-- finish_many, which answers it exactly (the error, the replay). Items are independent, as
-- finish_many's are: one answered FALSE does not stop the others.
CREATE FUNCTION bw_move(
    p_op TEXT, p_run TEXT, p_token TEXT, p_pipeline TEXT, p_stage TEXT, p_version BIGINT,
    p_to TEXT, p_role TEXT, p_terminal BIGINT, p_usage TEXT, p_event TEXT, p_now BIGINT,
    p_key TEXT, p_fp TEXT, p_result TEXT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    t_seq BIGINT;
    t_id TEXT;
BEGIN
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM idempotency WHERE key = p_key AND operation = p_op
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
        VALUES (p_key, p_op, p_fp, p_result, p_now);
    END IF;
    RETURN TRUE;
END
$$;

CREATE FUNCTION bw_finish_many(
    p_runs TEXT[], p_tokens TEXT[], p_pipelines TEXT[], p_stages TEXT[], p_versions BIGINT[],
    p_tos TEXT[], p_roles TEXT[], p_terminals BIGINT[], p_usages TEXT[], p_events TEXT[],
    p_now BIGINT, p_keys TEXT[], p_fps TEXT[], p_results TEXT[]
) RETURNS BOOLEAN[] LANGUAGE plpgsql AS $$
DECLARE
    done BOOLEAN[] := '{}';
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_runs, 1), 0) LOOP
        done := done || bw_move(
            'finish', p_runs[i], p_tokens[i], p_pipelines[i], p_stages[i], p_versions[i],
            p_tos[i], p_roles[i], p_terminals[i], p_usages[i], p_events[i], p_now, p_keys[i],
            p_fps[i], p_results[i]);
    END LOOP;
    RETURN done;
END
$$;
