-- Schema version 11 of the PostgreSQL rail: the claim scans free rows only.
--
-- tasks_claim (schema 1) holds every claimable-stage row, leased or not, and a lease's every
-- change adds an entry: a busy drain's claim walked past the live leases and the dead entries
-- of each claim's and each finish's old row versions at the front of the index (killed, but
-- still read until a vacuum), on every claim. tasks_free holds the rows with no lease only;
-- bw_claim_one (schema 7, otherwise unchanged) scans it, asking lease_expires_at_ms = 0: every
-- claim path has reclaimed the lapsed leases first (bw_claim declines while one exists, the
-- embedded-path claim reclaims them in its own transaction), so a lapsed lease is never there
-- to be missed. tasks_claim stays for the counts by role (backlog caps, the queue depth).
CREATE INDEX tasks_free ON tasks (role, priority DESC, seq, next_eligible_at_ms)
    WHERE dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms = 0;

CREATE OR REPLACE FUNCTION bw_claim_one(
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
