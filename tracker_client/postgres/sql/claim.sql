-- The claim: pick the best eligible task of a role and lease it, in ONE statement.
--
-- The same rules as the embedded claim (tracker_client/embedded/claims.py): highest priority
-- first, then creation order; skip delayed rows, leased rows, rows assigned to another agent,
-- rows with an unresolved dependency (an upstream not in a terminal stage, or dead-lettered or
-- cancelled: such a dependency never resolves), rows whose
-- concurrency key is held by another live lease, and stages at their per_state limit (leases
-- held in that stage, any role). No candidate cap: the scan goes on until a row qualifies.
-- The scan walks the partial index tasks_claim (claimable rows only); FOR UPDATE SKIP LOCKED
-- passes over a row another transaction holds instead of queueing behind it.
--
-- Parameters: role, agent, now, expires, ttl, limits (a JSON object stage -> limit, '{}' when
-- none), run_id, lease_id, token_sha256 (only the token's SHA-256 is stored).
WITH picked AS (
    SELECT t.seq
    FROM tasks t
    WHERE t.role = %(role)s
      AND t.dead_letter_reason IS NULL
      AND t.terminal = 0
      AND t.next_eligible_at_ms <= %(now)s
      AND t.lease_expires_at_ms <= %(now)s
      AND (t.assignee IS NULL OR t.assignee = %(agent)s)
      AND (t.has_deps = 0 OR NOT EXISTS (
          SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
          WHERE d.task_id = t.id AND (u.terminal = 0 OR u.dead_letter_reason IS NOT NULL)))
      AND (t.concurrency_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM tasks k
          WHERE k.concurrency_key = t.concurrency_key AND k.lease_expires_at_ms > %(now)s
            AND k.seq <> t.seq))
      AND (%(limits)s::jsonb ->> t.stage IS NULL OR (
          SELECT count(*) FROM tasks s
          WHERE s.lease_expires_at_ms > %(now)s AND s.stage = t.stage
      ) < (%(limits)s::jsonb ->> t.stage)::bigint)
    ORDER BY t.priority DESC, t.seq
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
), leased AS (
    UPDATE tasks t
    SET lease_expires_at_ms = %(expires)s,
        last_attempt = t.last_attempt + 1,
        lease_id = %(lease_id)s,
        lease_run_id = %(run_id)s,
        lease_token_sha256 = %(token_sha256)s,
        lease_ttl_ms = %(ttl)s
    FROM picked
    WHERE t.seq = picked.seq
    RETURNING t.*
), started AS (
    INSERT INTO runs (id, task_id, attempt, status, agent_id, agent_role, started_at_ms)
    SELECT %(run_id)s, leased.id, leased.last_attempt, 'running', %(agent)s, %(role)s, %(now)s
    FROM leased
    RETURNING id
)
SELECT leased.* FROM leased JOIN started ON started.id = leased.lease_run_id
