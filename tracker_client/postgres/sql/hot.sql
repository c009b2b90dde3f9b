-- hot: the one-round-trip writes (postgres/hot.py, postgres/batch.py): one prepared
-- statement each, run in its own implicit transaction (Database.one_call); the function takes
-- the write lock (shared) and sends the wake-ups itself (schema 9's bw_*_tx).

-- Parameters: the lock's name, the rail's channel, the follow channel, the instance's name,
-- then bw_transition's (postgres/hot.py's MOVE_FIELDS, in order).
-- name: hot.transition_tx
-- only: postgres
SELECT bw_transition_tx(%s::text, %s::text, %s::text, %s::text, %s::text, %s::text,
    %s::text, %s::text, %s::bigint, %s::text, %s::text, %s::bigint, %s::text, %s::text,
    %s::bigint, %s::text, %s::text, %s::text);

-- Parameters: the lock's name, the rail's channel, the follow channel, the instance's name,
-- now, the items (a JSON array of bw_move's fields but now).
-- name: hot.finish_many_tx
-- only: postgres
SELECT bw_finish_many_tx(%s::text, %s::text, %s::text, %s::text, %s::bigint, %s::jsonb);

-- Parameters: bw_finish_many_tx's (the lock's name, the rail's channel, the follow channel,
-- the instance's name, now, the items), then bw_claim_tx's after its wake-up ones (the
-- operation, role, agent, now, ttl, run ids, lease ids, token digests, key, fingerprint).
-- The first row: the moves' answers (NULL in the others: read once), then each row a claimed
-- task's columns, those claim.many_tx answers (all NULL in the one row of a claim that found
-- nothing). postgres/pairing.py.
-- name: hot.finish_claim_tx
-- only: postgres
SELECT CASE WHEN f.n = 1 THEN f.o_done END AS o_done, (f.o_task).seq, (f.o_task).id,
    (f.o_task).pipeline_id, (f.o_task).stage, (f.o_task).title, (f.o_task).description,
    (f.o_task).priority, (f.o_task).metadata, (f.o_task).task_version,
    (f.o_task).next_eligible_at_ms, (f.o_task).retry_delay_ms, (f.o_task).max_attempts,
    (f.o_task).dead_letter_stage, (f.o_task).dead_letter_reason, (f.o_task).created_at_ms,
    (f.o_task).updated_at_ms, (f.o_task).concurrency_key, (f.o_task).expires_at_ms,
    (f.o_task).run_at_ms, (f.o_task).dedupe_key, (f.o_task).parent_id,
    (f.o_task).max_stale_attempts, (f.o_task).stale_streak, (f.o_task).budgets,
    (f.o_task).last_attempt, (f.o_task).lease_run_id, (f.o_task).lease_expires_at_ms,
    (f.o_task).lease_ttl_ms, (f.o_task).checkpointed
FROM bw_finish_claim_tx(%s::text, %s::text, %s::text,
    %s::text, %s::bigint, %s::jsonb, %s::text, %s::text, %s::text, %s::bigint, %s::bigint,
    %s::text, %s::text, %s::text, %s::text, %s::text) WITH ORDINALITY AS f(o_done, o_task, n);
