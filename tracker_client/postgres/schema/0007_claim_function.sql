-- Schema version 7 of the PostgreSQL rail: the claim as functions (plans cached by plpgsql).
--
-- bw_claim_one is the claim statement itself (its rules below), run by the embedded-path claim
-- (sql/claim.sql calls it) and by bw_claim. bw_claim is the hot path of claim and claim_many
-- (tracker_client/postgres/claims.py): up to n claims, the idempotency check and record, in one
-- statement, so BEGIN, the write lock, the call and COMMIT are one round trip. Whatever it does
-- not do itself (a replayed key, housekeeping due: a lapsed lease or a past deadline, a role
-- with a rate limit or cap) raises SQLSTATE BW001 before writing anything, and the caller runs
-- the claim the embedded way, which does it.
-- The same rules as the embedded claim (tracker_client/rules/claims.py): highest priority
-- first, then creation order; skip delayed rows, leased rows, rows assigned to another agent,
-- rows with an unresolved dependency (an upstream not in a terminal stage, or dead-lettered or
-- cancelled: such a dependency never resolves), rows whose
-- concurrency key is held by another live lease, and stages at their per_state limit (leases
-- held in that stage, any role). No candidate cap: the scan goes on until a row qualifies.
-- The scan walks the partial index tasks_claim (claimable rows only); FOR UPDATE SKIP LOCKED
-- passes over a row another transaction holds instead of queueing behind it.
--
CREATE FUNCTION bw_claim_one(
    p_role TEXT, p_agent TEXT, p_now BIGINT, p_expires BIGINT, p_ttl BIGINT, p_limits JSONB,
    p_run TEXT, p_lease TEXT, p_token TEXT
) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT t.seq
        FROM tasks t
        WHERE t.role = p_role
          AND t.dead_letter_reason IS NULL
          AND t.terminal = 0
          AND t.next_eligible_at_ms <= p_now
          AND t.lease_expires_at_ms <= p_now
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
        LIMIT 1
        FOR UPDATE OF t SKIP LOCKED
    ), leased AS (
        UPDATE tasks t
        SET lease_expires_at_ms = p_expires,
            last_attempt = t.last_attempt + 1,
            lease_id = p_lease,
            lease_run_id = p_run,
            lease_token_sha256 = p_token,
            lease_ttl_ms = p_ttl
        FROM picked
        WHERE t.seq = picked.seq
        RETURNING t.*
    ), started AS (
        INSERT INTO runs (id, task_id, attempt, status, agent_id, agent_role, started_at_ms)
        SELECT p_run, leased.id, leased.last_attempt, 'running', p_agent, p_role, p_now
        FROM leased
        RETURNING id
    )
    SELECT leased.* FROM leased JOIN started ON started.id = leased.lease_run_id;
END
$$;

CREATE FUNCTION bw_claim(
    p_op TEXT, p_role TEXT, p_agent TEXT, p_now BIGINT, p_ttl BIGINT, p_runs TEXT[],
    p_leases TEXT[], p_tokens TEXT[], p_key TEXT, p_fp TEXT
) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
DECLARE
    got tasks%ROWTYPE;
    leased JSONB := '[]'::jsonb;
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
    FOR i IN 1 .. coalesce(array_length(p_runs, 1), 0) LOOP
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
