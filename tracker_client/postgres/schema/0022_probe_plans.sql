-- Schema version 22 of the PostgreSQL rail: a batch's grant and moves find their rows by key.
-- additive
-- A worker's connection keeps a generic plan of each statement of bw_grant and bw_moves for its
-- life, made at its first call. On a rail whose tasks were never analyzed (a fresh schema, or work
-- submitted since autovacuum's last pass: the worker's first batch comes within seconds of the
-- submit), those plans read every task: bw_grant's update joined its seqs to a sequential scan of
-- tasks (a hash join), and bw_moves' update found each item's task through tasks_pipeline (all the
-- pipeline's tasks, finished ones included, filtered on the lease), the runs look-up joined after
-- it. So each batch cost more with every task kept: 600 tasks drained by claim_many/finish_many of
-- 10, the last batches' moves took 3.3 ms each, 0.4-0.6 ms now (auto_explain, same server). Now
-- bw_grant runs with bw_moves' settings (a nested loop of probes through tasks' primary key:
-- sequential scans, hash and merge joins off) and answers its rows in slot order by their seqs'
-- places (no join of its own results again); bw_moves looks up the items' runs first and reaches
-- each task through its unique id only (its pipeline is compared with IS NOT DISTINCT FROM, which
-- no index serves: the same test, both sides never NULL there). bw_candidates' count of a stage's
-- live leases (a claim with per_state limits) read every task in such a plan: sequential scans are
-- off for it too. Names, arguments and answers are unchanged.

ALTER FUNCTION bw_candidates(TEXT, TEXT, BIGINT, JSONB, INTEGER) SET enable_seqscan = off;

CREATE OR REPLACE FUNCTION bw_grant(
    p_seqs BIGINT[], p_runs TEXT[], p_leases TEXT[], p_tokens TEXT[], p_agent TEXT,
    p_role TEXT, p_now BIGINT, p_expires BIGINT, p_ttl BIGINT
) RETURNS SETOF tasks LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
    RETURN QUERY
    WITH granted AS (
        UPDATE tasks t
        SET lease_expires_at_ms = p_expires,
            last_attempt = t.last_attempt + 1,
            lease_id = p_leases[u.i],
            lease_run_id = p_runs[u.i],
            lease_token_sha256 = p_tokens[u.i],
            lease_ttl_ms = p_ttl
        FROM unnest(p_seqs) WITH ORDINALITY AS u(seq, i)
        WHERE t.seq = u.seq
        RETURNING t.*
    ), started AS (
        INSERT INTO runs (id, task_id, attempt, status, agent_id, agent_role, started_at_ms)
        SELECT g.lease_run_id, g.id, g.last_attempt, 'running', p_agent, p_role, p_now
        FROM granted g
    )
    SELECT g.* FROM granted g ORDER BY array_position(p_seqs, g.seq);
END
$$;

CREATE OR REPLACE FUNCTION bw_moves(p_now BIGINT, p_items JSONB) RETURNS BOOLEAN[]
LANGUAGE plpgsql
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
          AND t.lease_expires_at_ms > p_now
          AND t.pipeline_id IS NOT DISTINCT FROM split_part(f.pipeline, '@', 1)
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
