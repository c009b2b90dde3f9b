-- Schema version 12 of the PostgreSQL rail: claim_many scans for its candidates once.
--
-- bw_claim (schema 7) called bw_claim_one once per free slot, and each call scanned tasks_free
-- from its front: a claim_many of 10 was 10 candidate scans, ~60 % of the claim's server time
-- (pg_stat_statements, track = all, in a no-op drain). The claim is now two functions that
-- bw_claim_one and bw_claim both call, so its rules are written once:
--
-- * bw_candidates: the first n candidates of a role in claim order, locked (FOR UPDATE SKIP
--   LOCKED), with the rules of schema 7/11: highest priority first, then creation order; skip
--   delayed rows, leased rows (tasks_free: every claim path reclaims lapsed leases first), rows
--   assigned to another agent, rows with an unresolved dependency, rows whose concurrency key
--   is held by another live lease, and stages at their per_state limit. Each row comes with
--   whether it has a concurrency key.
-- * bw_grant: leases the given rows (slot i gets run, lease and token-hash i) and starts their
--   runs, in one statement, answering the leased rows in slot order.
--
-- bw_claim takes the first n candidates in one scan and grants them together. That is what n
-- calls of bw_claim_one would grant, in the same order, because a candidate's eligibility does
-- not depend on the grants before it in the same call: bw_claim never runs with per_state
-- limits (a role with limits, caps or a rate limit declines to the embedded path), so what a
-- grant changes is its own row and its concurrency key. So the batch keeps the candidates up to
-- and including the first one with a concurrency key (whose check saw no grant of the call with
-- that key: those before it have none); the free slots left after a cut go through
-- bw_claim_one, one by one, which sees the grants. The idempotency check and record, and what
-- bw_claim declines (BW001), are unchanged.
CREATE FUNCTION bw_candidates(
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
            AND k.seq <> t.seq))
      AND (p_limits ->> t.stage IS NULL OR (
          SELECT count(*) FROM tasks s
          WHERE s.lease_expires_at_ms > p_now AND s.stage = t.stage
      ) < (p_limits ->> t.stage)::bigint)
    ORDER BY t.priority DESC, t.seq
    LIMIT p_n
    FOR UPDATE OF t SKIP LOCKED;
END
$$;

CREATE FUNCTION bw_grant(
    p_seqs BIGINT[], p_runs TEXT[], p_leases TEXT[], p_tokens TEXT[], p_agent TEXT,
    p_role TEXT, p_now BIGINT, p_expires BIGINT, p_ttl BIGINT
) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT u.seq, u.i FROM unnest(p_seqs) WITH ORDINALITY AS u(seq, i)
    ), granted AS (
        UPDATE tasks t
        SET lease_expires_at_ms = p_expires,
            last_attempt = t.last_attempt + 1,
            lease_id = p_leases[picked.i],
            lease_run_id = p_runs[picked.i],
            lease_token_sha256 = p_tokens[picked.i],
            lease_ttl_ms = p_ttl
        FROM picked
        WHERE t.seq = picked.seq
        RETURNING t.*
    ), started AS (
        INSERT INTO runs (id, task_id, attempt, status, agent_id, agent_role, started_at_ms)
        SELECT g.lease_run_id, g.id, g.last_attempt, 'running', p_agent, p_role, p_now
        FROM granted g
        RETURNING id
    )
    SELECT granted.*
    FROM granted
    JOIN started ON started.id = granted.lease_run_id
    JOIN picked ON picked.seq = granted.seq
    ORDER BY picked.i;
END
$$;

CREATE OR REPLACE FUNCTION bw_claim_one(
    p_role TEXT, p_agent TEXT, p_now BIGINT, p_expires BIGINT, p_ttl BIGINT, p_limits JSONB,
    p_run TEXT, p_lease TEXT, p_token TEXT
) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT * FROM bw_grant(
        ARRAY(SELECT c.o_seq FROM bw_candidates(p_role, p_agent, p_now, p_limits, 1) c),
        ARRAY[p_run], ARRAY[p_lease], ARRAY[p_token], p_agent, p_role, p_now, p_expires, p_ttl);
END
$$;

CREATE OR REPLACE FUNCTION bw_claim(
    p_op TEXT, p_role TEXT, p_agent TEXT, p_now BIGINT, p_ttl BIGINT, p_runs TEXT[],
    p_leases TEXT[], p_tokens TEXT[], p_key TEXT, p_fp TEXT
) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
DECLARE
    got tasks%ROWTYPE;
    leased JSONB := '[]'::jsonb;
    wanted INTEGER := coalesce(array_length(p_runs, 1), 0);
    seqs BIGINT[];
    keyed BOOLEAN[];
    found_n INTEGER;
    taken INTEGER := 0;
    cut INTEGER;
BEGIN
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM idempotency WHERE key = p_key AND operation = p_op
    ) THEN
        RAISE EXCEPTION 'claim: replayed key' USING ERRCODE = 'BW001';
    END IF;
    IF EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at_ms > 0 AND lease_expires_at_ms <= p_now)
       OR EXISTS (SELECT 1 FROM tasks WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= p_now
                  AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= p_now)
       OR EXISTS (SELECT 1 FROM rate_limits WHERE role = p_role) THEN
        RAISE EXCEPTION 'claim: housekeeping or a rate limit due' USING ERRCODE = 'BW001';
    END IF;
    IF wanted > 1 THEN
        SELECT array_agg(c.o_seq ORDER BY c.n), array_agg(c.o_keyed ORDER BY c.n)
        INTO seqs, keyed
        FROM bw_candidates(p_role, p_agent, p_now, '{}'::jsonb, wanted)
             WITH ORDINALITY AS c(o_seq, o_keyed, n);
        found_n := coalesce(array_length(seqs, 1), 0);
        cut := array_position(keyed, true);
        -- the rows after the first keyed one are rows a grant of this call might make
        -- ineligible: their slots go one by one below
        taken := CASE WHEN cut IS NOT NULL AND cut < found_n THEN cut ELSE found_n END;
        IF taken > 0 THEN
            RETURN QUERY SELECT * FROM bw_grant(
                seqs[1:taken], p_runs[1:taken], p_leases[1:taken], p_tokens[1:taken], p_agent,
                p_role, p_now, p_now + p_ttl, p_ttl);
        END IF;
        IF taken = found_n THEN
            wanted := taken;  -- no cut: fewer candidates than slots means nothing more to find
        END IF;
    END IF;
    FOR i IN taken + 1 .. wanted LOOP
        SELECT * INTO got FROM bw_claim_one(
            p_role, p_agent, p_now, p_now + p_ttl, p_ttl, '{}'::jsonb, p_runs[i], p_leases[i],
            p_tokens[i]);
        EXIT WHEN NOT FOUND;
        RETURN NEXT got;
        taken := i;
    END LOOP;
    FOR i IN 1 .. taken LOOP  -- slots 1..taken were granted, in order
        leased := leased || jsonb_build_array(
            jsonb_build_object('lease_id', p_leases[i], 'run_id', p_runs[i]));
    END LOOP;
    IF p_key IS NOT NULL AND (p_op = 'claim_many' OR jsonb_array_length(leased) > 0) THEN
        INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
        VALUES (p_key, p_op, p_fp,
                CASE WHEN p_op = 'claim' THEN (leased -> 0)::text ELSE leased::text END, p_now);
    END IF;
END
$$;
