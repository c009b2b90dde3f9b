-- Schema version 21 of the PostgreSQL rail: an idle parked claim stands at the rail, and the
-- create that brings its work claims for it.
-- additive
-- An idle worker's parked claim (tracker_client/postgres/idle.py) used to wait for the create's
-- NOTIFY and then send its keyed claim: a second write, its own WAL flush and an idle backend
-- waking, ~3 ms on the path of every pickup (docs/benchmarks.md, "Pickup latency"). Now, while
-- it sleeps, it registers a standing claim: a row in standing_claims with its first attempt's
-- idempotency key, its role, agent, lease TTL, the claim's fingerprint and the run ids, lease
-- ids and token digests it made ahead (one per lease it asks for: the tokens are derived from
-- the key, so the worker knows them and the row holds only their SHA-256). A create calls
-- bw_hand_off with the ids of the tasks it inserted, in its own transaction: for the standing
-- claims of those tasks' roles, longest standing first, each taken once (locked SKIP LOCKED and
-- deleted), it runs that claim, bw_claim under the attempt's key, in a subtransaction (a claim
-- that is refused or leases nothing is rolled back alone, its row kept, and the create goes
-- on). The create's NOTIFY then wakes the worker, whose claim under that key (bw_stand_claim_tx)
-- finds it recorded and reads the leases: no write, no WAL flush on the pickup's path.
--
-- A standing claim never strands a task: its holder keeps a session advisory lock (the pair
-- holder_a, holder_b) on its wake-up listener's connection (tracker_client/postgres/wake.py); a
-- create that can take that lock itself (pg_try_advisory_xact_lock) knows the holder is gone
-- (its process died, its connection dropped) and deletes the row without claiming. A holder
-- that stops withdraws its row (a delete: none left means a create claimed for it, and the
-- worker takes those leases through the key's record, then gives them back). The table is
-- UNLOGGED: its rows live no longer than their holders' sessions, a crash empties it, and a
-- transaction that writes only it commits without waiting for a WAL flush. A worker of an
-- earlier schema never registers one and its creates never call bw_hand_off: it claims as before.
CREATE UNLOGGED TABLE standing_claims (
    key TEXT PRIMARY KEY NOT NULL,
    role TEXT NOT NULL,
    agent TEXT NOT NULL,
    ttl_ms BIGINT NOT NULL,
    fingerprint TEXT NOT NULL,
    runs TEXT[] NOT NULL,
    leases TEXT[] NOT NULL,
    tokens TEXT[] NOT NULL,
    holder_a INTEGER NOT NULL,
    holder_b INTEGER NOT NULL,
    since TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX standing_claims_role ON standing_claims (role, since);

-- The standing claims of the roles of tasks p_ids (just inserted by the caller's transaction)
-- claim at p_now, longest standing first, until as many leases as tasks were granted; how many
-- were. Never raises for a claim: the create it rides in is not refused for it.
CREATE FUNCTION bw_hand_off(p_ids TEXT[], p_now BIGINT) RETURNS INTEGER LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    s standing_claims%ROWTYPE;
    granted INTEGER := 0;
    got INTEGER;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM standing_claims) THEN
        RETURN 0;
    END IF;
    FOR s IN
        SELECT c.* FROM standing_claims c
        WHERE c.role IN (SELECT t.role FROM tasks t WHERE t.id = ANY (p_ids))
        ORDER BY c.since
        FOR UPDATE OF c SKIP LOCKED
    LOOP
        IF pg_try_advisory_xact_lock(s.holder_a, s.holder_b)  -- its holder is gone
           OR EXISTS (SELECT 1 FROM idempotency WHERE key = s.key AND operation = 'claim_many')
        THEN  -- (or it claimed under its key already: a claim its statement sent on)
            DELETE FROM standing_claims WHERE key = s.key;
            CONTINUE;
        END IF;
        BEGIN
            DELETE FROM standing_claims WHERE key = s.key;
            SELECT count(*) INTO got FROM bw_claim(
                'claim_many', s.role, s.agent, p_now, s.ttl_ms, s.runs, s.leases, s.tokens,
                s.key, s.fingerprint);
            IF got = 0 THEN
                RAISE EXCEPTION 'hand-off: nothing to lease' USING ERRCODE = 'BW001';
            END IF;
        EXCEPTION WHEN OTHERS THEN
            got := 0;  -- refused, or nothing for it: rolled back alone, the row kept
        END;
        granted := granted + got;
        EXIT WHEN granted >= coalesce(array_length(p_ids, 1), 0);
    END LOOP;
    RETURN granted;
END
$$;

-- A standing claim's own claim (its holder was woken, or looks again): bw_claim_tx's parameters
-- and answer. It withdraws the row first (waiting for a create that is claiming for it); when a
-- create claimed under the key, the leases it recorded that are still held under their runs
-- are read (nothing written), else bw_claim_tx claims with the ids made ahead.
CREATE FUNCTION bw_stand_claim_tx(
    p_lock TEXT, p_notify TEXT, p_follow TEXT, p_instance TEXT,
    p_op TEXT, p_role TEXT, p_agent TEXT, p_now BIGINT, p_ttl BIGINT, p_runs TEXT,
    p_leases TEXT, p_tokens TEXT, p_key TEXT, p_fp TEXT
) RETURNS SETOF tasks LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    DELETE FROM standing_claims WHERE key = p_key;
    IF EXISTS (SELECT 1 FROM idempotency WHERE key = p_key AND operation = p_op) THEN
        RETURN QUERY
        SELECT t.* FROM runs r JOIN tasks t ON t.id = r.task_id
        WHERE r.id = ANY (p_runs::text[]) AND t.lease_run_id = r.id
          AND t.lease_expires_at_ms > p_now;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM bw_claim_tx(
        p_lock, p_notify, p_follow, p_instance, p_op, p_role, p_agent, p_now, p_ttl, p_runs,
        p_leases, p_tokens, p_key, p_fp);
END
$$;
