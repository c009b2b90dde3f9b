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
-- Every row: the moves' answers, then a claimed task's columns (all NULL in the one row of a
-- claim that found nothing). postgres/pairing.py.
-- name: hot.finish_claim_tx
-- only: postgres
SELECT f.o_done, (f.o_task).* FROM bw_finish_claim_tx(%s::text, %s::text, %s::text,
    %s::text, %s::bigint, %s::jsonb, %s::text, %s::text, %s::text, %s::bigint, %s::bigint,
    %s::text, %s::text, %s::text, %s::text, %s::text) f;
