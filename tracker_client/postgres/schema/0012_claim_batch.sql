-- Schema version 12 of the PostgreSQL rail: claim_many scans for its candidates once.
--
-- bw_claim (schema 7) called bw_claim_one once per free slot, and each call scanned tasks_free
-- from its front: a claim_many of 10 was 10 candidate scans, ~60 % of the claim's server time
-- (pg_stat_statements, track = all, in a no-op drain). Now one scan takes the first n candidates
-- in claim order (FOR UPDATE SKIP LOCKED), and one UPDATE leases them, one INSERT starts their
-- runs. It grants the same rows as n calls of bw_claim_one would, in the same order, because a
-- candidate's eligibility does not depend on the grants before it in the same call: bw_claim
-- never runs with per_state limits (it passes none; a role with limits, caps or a rate limit
-- declines to the embedded path), so what a grant changes is its own row and its concurrency
-- key. So the batch keeps the candidates up to and including the first one with a concurrency
-- key (whose check saw no grant of the call with that key: those before it have none); the
-- free slots left after a cut go through bw_claim_one, one by one, which sees the grants.
-- Otherwise unchanged: the idempotency check and record, and what it declines (BW001).
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
        -- bw_claim_one's candidate rules (schema 11) without its per_state limits (none here)
        SELECT array_agg(c.seq ORDER BY c.priority DESC, c.seq),
               array_agg(c.concurrency_key IS NOT NULL ORDER BY c.priority DESC, c.seq)
        INTO seqs, keyed
        FROM (
            SELECT t.seq, t.priority, t.concurrency_key
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
            ORDER BY t.priority DESC, t.seq
            LIMIT wanted
            FOR UPDATE OF t SKIP LOCKED
        ) c;
        taken := coalesce(array_length(seqs, 1), 0);
        cut := array_position(keyed, true);
        IF cut IS NOT NULL AND cut < taken THEN
            taken := cut;  -- the rest are rows a grant of this call might make ineligible
        END IF;
        IF taken > 0 THEN
            RETURN QUERY
            WITH picked AS (
                SELECT u.seq, u.i FROM unnest(seqs[1:taken]) WITH ORDINALITY AS u(seq, i)
            ), granted AS (
                UPDATE tasks t
                SET lease_expires_at_ms = p_now + p_ttl,
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
            FOR i IN 1 .. taken LOOP
                leased := leased || jsonb_build_array(
                    jsonb_build_object('lease_id', p_leases[i], 'run_id', p_runs[i]));
            END LOOP;
        END IF;
        IF taken = coalesce(array_length(seqs, 1), 0) AND taken < wanted THEN
            wanted := taken;  -- fewer candidates than slots, none cut: nothing more to find
        END IF;
    END IF;
    FOR i IN taken + 1 .. wanted LOOP
        SELECT * INTO got FROM bw_claim_one(
            p_role, p_agent, p_now, p_now + p_ttl, p_ttl, '{}'::jsonb, p_runs[i], p_leases[i],
            p_tokens[i]);
        EXIT WHEN NOT FOUND;
        RETURN NEXT got;
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
