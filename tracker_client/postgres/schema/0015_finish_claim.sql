-- Schema version 15 of the PostgreSQL rail: a worker's reports and its next claim in one commit.
-- additive
-- A worker's runs end together and free their slots together: their final reports (one
-- finish_many) and the claim for those slots (one claim_many) reach the rail within a
-- scheduling pass or two, and each was its own transaction, at stock durability its own WAL
-- flush. bw_finish_claim_tx runs both in one statement (tracker_client/postgres/pairing.py):
-- bw_finish_many_tx's moves, then bw_claim_tx's claim, under the shared write lock, with the
-- wake-ups once. It only adds a function: a worker of an earlier schema never calls it.
CREATE FUNCTION bw_finish_claim_tx(
    p_lock TEXT, p_notify TEXT, p_follow TEXT, p_instance TEXT, p_now BIGINT, p_items JSONB,
    p_op TEXT, p_role TEXT, p_agent TEXT, p_claim_now BIGINT, p_ttl BIGINT, p_runs TEXT,
    p_leases TEXT, p_tokens TEXT, p_key TEXT, p_fp TEXT
) RETURNS TABLE (o_done BOOLEAN[], o_task tasks) LANGUAGE plpgsql AS $$
DECLARE
    item JSONB;
    done BOOLEAN[] := '{}';
    got tasks%ROWTYPE;
    answered BOOLEAN := false;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_lock, 0));
    FOR item IN SELECT value FROM jsonb_array_elements(p_items) LOOP
        done := done || bw_move(
            'finish', item ->> 'run', item ->> 'token', item ->> 'pipeline', item ->> 'stage',
            (item ->> 'version')::bigint, item ->> 'to', item ->> 'role',
            (item ->> 'terminal')::bigint, item ->> 'usage', item ->> 'event', p_now,
            item ->> 'key', item ->> 'fp', item ->> 'result');
    END LOOP;
    FOR got IN SELECT * FROM bw_claim(
        p_op, p_role, p_agent, p_claim_now, p_ttl, p_runs::text[], p_leases::text[],
        p_tokens::text[], p_key, p_fp)
    LOOP
        o_done := done;
        o_task := got;
        answered := true;
        RETURN NEXT;
    END LOOP;
    PERFORM bw_wake(p_notify, p_follow, p_instance);
    IF NOT answered THEN
        o_done := done;
        o_task := NULL;
        RETURN NEXT;
    END IF;
END
$$;
