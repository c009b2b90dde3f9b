-- wait: what wait_for_work reads (rules/rail.py).

-- The earliest live lease expiry (the partial index tasks_leased answers it; the `> 0` lets it
-- under a generic plan too, instead of a scan of every task kept): an idle worker wakes when it
-- lapses, to reclaim the task.
-- name: wait.next_expiry
SELECT min(lease_expires_at_ms) FROM tasks
WHERE lease_expires_at_ms > 0 AND lease_expires_at_ms > %s;

-- An idle parked claim's look before it waits (postgres/idle.py), in one read and no write:
-- whether its key has a claim recorded already (a retry: the rail's parked claim replays it);
-- whether a claim of :role for :agent could lease now (bw_candidates' rules without its row
-- locks and without per_state limits, so it may say yes where the claim finds nothing, never
-- the other way round), or must run first anyway (a lapsed lease to reclaim, a task past its
-- deadline, a rate-limited role: time alone makes their work claimable); and the earliest
-- time at which time alone may make work claimable: a waiting task of :role coming due (a
-- delay, a retry delay), any live lease lapsing (its task, a concurrency key or a per_state
-- slot freed), a waiting task's deadline (a dead-letter stage with a role). Each part walks a
-- partial index: tasks_free for the role, tasks_leased, tasks_deadline. Positional parameters
-- (one prepared statement): the key, then role, agent and now where each appears
-- (postgres/idle.py look_params).
-- name: wait.idle_look
-- only: postgres
SELECT
    EXISTS (SELECT 1 FROM idempotency WHERE key = %s AND operation = 'claim_many'),
    EXISTS (
        SELECT 1 FROM tasks t
        WHERE t.role = %s
          AND t.dead_letter_reason IS NULL
          AND t.terminal = 0
          AND t.next_eligible_at_ms <= %s
          AND t.lease_expires_at_ms = 0
          AND (t.assignee IS NULL OR t.assignee = %s)
          AND (t.has_deps = 0 OR NOT EXISTS (
              SELECT 1 FROM dependencies d JOIN tasks u ON u.id = d.depends_on_task_id
              WHERE d.task_id = t.id AND (u.terminal = 0 OR u.dead_letter_reason IS NOT NULL)))
          AND (t.concurrency_key IS NULL OR NOT EXISTS (
              SELECT 1 FROM tasks k
              WHERE k.concurrency_key = t.concurrency_key AND k.lease_expires_at_ms > %s
                AND k.seq <> t.seq)))
    OR EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at_ms > 0
        AND lease_expires_at_ms <= %s)
    OR EXISTS (SELECT 1 FROM tasks WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= %s
        AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= %s)
    OR EXISTS (SELECT 1 FROM rate_limits WHERE role = %s),
    LEAST(
        (SELECT min(next_eligible_at_ms) FROM tasks
         WHERE role = %s AND dead_letter_reason IS NULL AND terminal = 0
           AND lease_expires_at_ms = 0 AND next_eligible_at_ms > %s),
        (SELECT min(lease_expires_at_ms) FROM tasks
         WHERE lease_expires_at_ms > 0 AND lease_expires_at_ms > %s),
        (SELECT min(expires_at_ms) FROM tasks
         WHERE expires_at_ms IS NOT NULL AND dead_letter_reason IS NULL AND terminal = 0
           AND expires_at_ms > %s));
