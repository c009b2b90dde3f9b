-- Schema version 19 of the PostgreSQL rail: the hot path's statements are planned once.
-- additive
-- Where the server's time per task went (docs/benchmarks.md, "PostgreSQL rail"): about half
-- of it was planning, not running. plpgsql caches a statement's plan, but for each call it
-- compares the cached generic plan with a custom one made for the call's own values, and keeps
-- planning anew when the custom one is cheaper: the finish's row look-up, the claim's
-- candidates and its housekeeping check were (a parameter compared with lease_expires_at_ms
-- lets a custom plan prove tasks_leased's predicate, `> 0`, which a generic one can't). And
-- the look-up called bw_version_is, a SQL function with a FROM, which PostgreSQL before 18
-- plans again at every execution of the statement that calls it.
-- So: bw_transition and bw_move spell bw_version_is's check out inline (the same condition);
-- bw_candidates compares a live lease with 0 too (its generic plan reaches it through
-- tasks_leased); and the functions a worker's statements call (bw_claim_tx, bw_claim_one,
-- bw_transition_tx, bw_finish_many_tx, bw_finish_claim_tx) run theirs, and those of the
-- functions they call, on generic plans: each planned once per connection. Every one of those
-- plans reaches its rows through an index (tests/postgres/test_generic_plans.py).
-- Additive: the functions keep their names, arguments and answers; a worker of an earlier
-- schema calls them as before and gets the same results, planned once.

CREATE OR REPLACE FUNCTION bw_transition(
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
      AND t.lease_expires_at_ms > p_now AND t.pipeline_id = split_part(p_pipeline, '@', 1)
      AND t.stage = p_stage AND (p_version IS NULL OR t.task_version = p_version)
      AND (strpos(p_pipeline, '@') = 0 OR EXISTS (
          SELECT 1 FROM pipelines p
          WHERE p.id = t.pipeline_id AND p.version = split_part(p_pipeline, '@', 2)::bigint
            AND coalesce(t.pipeline_version, p.version) = p.version))
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

CREATE OR REPLACE FUNCTION bw_move(
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
      AND t.lease_expires_at_ms > p_now AND t.pipeline_id = split_part(p_pipeline, '@', 1)
      AND t.stage = p_stage AND (p_version IS NULL OR t.task_version = p_version)
      AND (strpos(p_pipeline, '@') = 0 OR EXISTS (
          SELECT 1 FROM pipelines p
          WHERE p.id = t.pipeline_id AND p.version = split_part(p_pipeline, '@', 2)::bigint
            AND coalesce(t.pipeline_version, p.version) = p.version))
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

CREATE OR REPLACE FUNCTION bw_candidates(
    p_role TEXT, p_agent TEXT, p_now BIGINT, p_limits JSONB, p_n INTEGER
) RETURNS TABLE (o_seq BIGINT, o_keyed BOOLEAN) LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    SELECT t.seq, t.concurrency_key IS NOT NULL
    FROM tasks t
    WHERE t.role = p_role
      AND t.dead_letter_reason IS NULL
      AND t.terminal = 0
      AND t.next_eligible_at_ms <= p_now
      AND t.lease_expires_at_ms = 0
      AND (t.assignee IS NULL OR t.assignee = p_agent)
      AND (t.has_deps = 0 OR NOT EXISTS (
          SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
          WHERE d.task_id = t.id AND (u.terminal = 0 OR u.dead_letter_reason IS NOT NULL)))
      AND (t.concurrency_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM tasks k
          WHERE k.concurrency_key = t.concurrency_key AND k.lease_expires_at_ms > p_now
            AND k.lease_expires_at_ms > 0 AND k.seq <> t.seq))
      AND (p_limits ->> t.stage IS NULL OR (
          SELECT count(*) FROM tasks s
          WHERE s.lease_expires_at_ms > p_now AND s.lease_expires_at_ms > 0 AND s.stage = t.stage
      ) < (p_limits ->> t.stage)::bigint)
    ORDER BY t.priority DESC, t.seq
    LIMIT p_n
    FOR UPDATE OF t SKIP LOCKED;
END
$$;

ALTER FUNCTION bw_claim_one(TEXT, TEXT, BIGINT, BIGINT, BIGINT, JSONB, TEXT, TEXT, TEXT)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bw_claim_tx(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT
) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bw_transition_tx(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, BIGINT, TEXT, TEXT,
    BIGINT, TEXT, TEXT, TEXT
) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bw_finish_many_tx(TEXT, TEXT, TEXT, TEXT, BIGINT, JSONB)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bw_finish_claim_tx(
    TEXT, TEXT, TEXT, TEXT, BIGINT, JSONB, TEXT, TEXT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT,
    TEXT, TEXT
) SET plan_cache_mode = force_generic_plan;
