-- The claim: pick the best eligible task of a role and lease it, in ONE statement.
--
-- The statement is the function bw_claim_one (schema/0007_claim_function.sql, where its rules
-- are spelled out: the embedded claim's ordering, assignment, dependency, concurrency-key and
-- per_state rules, FOR UPDATE SKIP LOCKED over the claimable partial index, the run inserted
-- and the lease's token SHA-256 set in the same statement); plpgsql keeps its plan.
--
-- Parameters: role, agent, now, expires, ttl, limits (a JSON object stage -> limit, '{}' when
-- none), run_id, lease_id, token_sha256 (only the token's SHA-256 is stored).
-- name: claim.one
-- only: postgres
SELECT * FROM bw_claim_one(
    %(role)s::text, %(agent)s::text, %(now)s::bigint, %(expires)s::bigint, %(ttl)s::bigint,
    %(limits)s::jsonb, %(run_id)s::text, %(lease_id)s::text, %(token_sha256)s::text);

-- Before a claim, in one round trip: (a lease has lapsed, a waiting task is past its
-- deadline) at :now (the housekeeping a claim does first, claims.housekeeping), and whether
-- role :role has a rate limit or cap (a role without one skips the token bucket's read).
-- name: claim.preflight
-- only: postgres
SELECT EXISTS (SELECT 1 FROM tasks WHERE lease_expires_at_ms > 0
    AND lease_expires_at_ms <= %(now)s),
EXISTS (SELECT 1 FROM tasks WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= %(now)s
    AND dead_letter_reason IS NULL AND terminal = 0 AND lease_expires_at_ms <= %(now)s),
EXISTS (SELECT 1 FROM rate_limits WHERE role = %(role)s);

-- A lease claim.one made on a row that cannot be read is undone: its run deleted, the
-- attempt given back and the lease dropped (the row is then dead-lettered corrupt_row).
-- name: claim.undo_run
-- only: postgres
DELETE FROM runs WHERE id = %s;

-- name: claim.undo_lease
-- only: postgres
UPDATE tasks SET last_attempt = last_attempt - 1,
    lease_expires_at_ms = 0, lease_id = NULL, lease_run_id = NULL, lease_token_sha256 = NULL,
    lease_ttl_ms = NULL
WHERE seq = %s;

-- The run holding a task's lease now (a corrupt row bw_claim leased is refused only while
-- that claim still holds it).
-- name: claim.lease_run
-- only: postgres
SELECT lease_run_id FROM tasks WHERE seq = %s;

-- name: claim.cancel_run
-- only: postgres
UPDATE runs SET status = 'cancelled' WHERE id = %s;

-- bw_claim_tx (schema 9): the write lock (shared), bw_claim and the wake-ups in one statement.
-- Parameters: the lock's name, the rail's channel, the follow channel, the instance's name,
-- the operation, role, agent, now, ttl, then the run ids, lease ids and token digests (text
-- arrays), the idempotency key and its fingerprint.
-- Each leased row answers only what its lease is built from (the Task model's fields, the
-- lease's columns and the checkpoint flag; tests/postgres/test_claim_columns.py), not the whole
-- tasks row: the worker's loop loads every column it gets into a Python object.
-- name: claim.many_tx
-- only: postgres
SELECT seq, id, pipeline_id, stage, title, description, priority, metadata, task_version,
    next_eligible_at_ms, retry_delay_ms, max_attempts, dead_letter_stage, dead_letter_reason,
    created_at_ms, updated_at_ms, concurrency_key, expires_at_ms, run_at_ms, dedupe_key,
    parent_id, max_stale_attempts, stale_streak, budgets, last_attempt, lease_run_id,
    lease_expires_at_ms, lease_ttl_ms, checkpointed
FROM bw_claim_tx(%s::text, %s::text, %s::text, %s::text, %s::text, %s::text,
    %s::text, %s::bigint, %s::bigint, %s::text, %s::text, %s::text, %s::text, %s::text);
