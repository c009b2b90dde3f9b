-- Schema version 20 of the PostgreSQL rail: a batch's moves in one statement.
-- additive
-- Where the server's time per task went after schema 19 (docs/benchmarks.md, "PostgreSQL
-- rail"): a finish_many of ten plain moves called bw_move once per item, and each call ran six
-- statements (the idempotency check, the row look-up locking the task, the run's update, the
-- task's update, the event, the idempotency record): about half of a move's server time was
-- those calls' and statements' own overhead, not their row writes. bw_moves writes every item
-- of a batch with ONE statement: each table is written once per batch, the task's row is
-- found, checked and updated by the update itself (no separate lock of the row first), and
-- the answers are the ones the loop gave, or FALSE (nothing written for that item: its caller
-- takes it the rail's way, which answers it exactly). bw_finish_many_tx and bw_finish_claim_tx
-- call it; their names, arguments and answers stay, so a worker of an earlier schema calling
-- them gets the same results.
-- And bw_wake leaves out the rail channel's NOTIFY while the only live waiters row is the
-- writer's own: an instance ignores its own notifications (the write already woke its
-- waiters in process, tracker_client/postgres/wake.py), so a worker alone on a rail whose
-- claims come back short now and then (its row then lives 30 s) no longer notifies itself
-- with every batch it reports.

-- The plain moves of a batch (bw_move's fields per item, as bw_finish_many_tx's JSON carries
-- them), in one statement: per item whether it was written. An item repeating an earlier
-- item's run or idempotency key is answered FALSE (the loop could only write it if the
-- earlier one was refused; the rail's way answers it). Joins go through the tables' unique
-- indexes, one probe per item: sequential scans, hash and merge joins are off for it, since a
-- generic plan knows neither that a batch is small nor how large the tables have grown since
-- the plan was made (a plan made on a fresh rail, kept by a connection for its life, would
-- otherwise read every task or idempotency record kept).
CREATE FUNCTION bw_moves(p_now BIGINT, p_items JSONB) RETURNS BOOLEAN[] LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    done BOOLEAN[];
BEGIN
    WITH items AS MATERIALIZED (
        SELECT i.*
        FROM ROWS FROM (jsonb_to_recordset(p_items) AS (
            run TEXT, token TEXT, pipeline TEXT, stage TEXT, version BIGINT, "to" TEXT,
            role TEXT, terminal BIGINT, usage TEXT, event TEXT, key TEXT, fp TEXT,
            result TEXT)) WITH ORDINALITY AS i(
            run, token, pipeline, stage, version, "to", role, terminal, usage, event, key, fp,
            result, n)
    ), firsts AS (
        SELECT i.*, r.task_id
        FROM items i JOIN runs r ON r.id = i.run
        WHERE NOT EXISTS (
            SELECT 1 FROM items j WHERE j.n < i.n AND (j.run = i.run OR j.key = i.key))
          AND NOT EXISTS (
            SELECT 1 FROM idempotency WHERE key = i.key AND operation = 'finish')
    ), moved AS (
        UPDATE tasks t SET stage = f."to", task_version = t.task_version + 1,
            dead_letter_reason = NULL, next_eligible_at_ms = 0, updated_at_ms = p_now,
            role = f.role, terminal = f.terminal, stale_streak = 0, lease_expires_at_ms = 0,
            lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
            lease_ttl_ms = NULL
        FROM firsts f
        WHERE t.id = f.task_id AND t.lease_run_id = f.run AND t.lease_token_sha256 = f.token
          AND t.lease_expires_at_ms > p_now AND t.pipeline_id = split_part(f.pipeline, '@', 1)
          AND t.stage = f.stage AND (f.version IS NULL OR t.task_version = f.version)
          AND (strpos(f.pipeline, '@') = 0 OR EXISTS (
              SELECT 1 FROM pipelines p
              WHERE p.id = t.pipeline_id AND p.version = split_part(f.pipeline, '@', 2)::bigint
                AND coalesce(t.pipeline_version, p.version) = p.version))
        RETURNING f.n, f.run, t.id AS task_id, f.usage, f.event, f.key, f.fp, f.result
    ), ended AS (
        UPDATE runs r SET status = 'completed', ended_at_ms = p_now, usage = m.usage
        FROM moved m WHERE r.id = m.run
    ), noted AS (
        INSERT INTO events (task_id, run_id, ts_ms, kind, data)
        SELECT m.task_id, m.run, p_now, 'transition', m.event FROM moved m ORDER BY m.n
    ), kept AS (
        INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
        SELECT m.key, 'finish', m.fp, m.result, p_now FROM moved m WHERE m.key IS NOT NULL
    )
    SELECT coalesce(array_agg(m.n IS NOT NULL ORDER BY i.n), '{}')
    INTO done
    FROM items i LEFT JOIN moved m ON m.n = i.n;
    RETURN done;
END
$$;

CREATE OR REPLACE FUNCTION bw_finish_many_tx(
    p_lock TEXT, p_notify TEXT, p_follow TEXT, p_instance TEXT, p_now BIGINT, p_items JSONB
) RETURNS BOOLEAN[] LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    done BOOLEAN[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_lock, 0));
    done := bw_moves(p_now, p_items);
    PERFORM bw_wake(p_notify, p_follow, p_instance);
    RETURN done;
END
$$;

CREATE OR REPLACE FUNCTION bw_finish_claim_tx(
    p_lock TEXT, p_notify TEXT, p_follow TEXT, p_instance TEXT, p_now BIGINT, p_items JSONB,
    p_op TEXT, p_role TEXT, p_agent TEXT, p_claim_now BIGINT, p_ttl BIGINT, p_runs TEXT,
    p_leases TEXT, p_tokens TEXT, p_key TEXT, p_fp TEXT
) RETURNS TABLE (o_done BOOLEAN[], o_task tasks) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    done BOOLEAN[];
    got tasks%ROWTYPE;
    answered BOOLEAN := false;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_lock, 0));
    done := bw_moves(p_now, p_items);
    FOR got IN SELECT * FROM bw_claim(
        p_op, p_role, p_agent, p_claim_now, p_ttl, p_runs::text[], p_leases::text[],
        p_tokens::text[], p_key, p_fp)
    LOOP
        o_done := done;
        o_task := got;
        answered := true;
        RETURN NEXT;
    END LOOP;
    PERFORM bw_wake(p_notify, p_follow, p_instance);
    IF NOT answered THEN
        o_done := done;
        o_task := NULL;
        RETURN NEXT;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION bw_wake(p_notify TEXT, p_follow TEXT, p_instance TEXT)
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    IF p_notify IS NOT NULL AND EXISTS (
        SELECT 1 FROM waiters
        WHERE expires_at > clock_timestamp() AND instance IS DISTINCT FROM p_instance)
    THEN
        PERFORM pg_notify(p_notify, p_instance);
    END IF;
    IF p_follow IS NOT NULL AND EXISTS (SELECT 1 FROM followers WHERE expires_at > clock_timestamp())
    THEN
        PERFORM pg_notify(p_follow, p_instance);
    END IF;
END
$$;

