-- Schema version 9 of the PostgreSQL rail: the hot path's calls as ONE statement each.
--
-- The one-round-trip calls of schemas 6-8 sent BEGIN, the write lock, the call, the wake-up
-- NOTIFYs and COMMIT as one multi-statement query: one round trip, but six statements the
-- server parses and plans every time, their literals quoted by the client. These wrappers do
-- the same inside one function, run as one prepared statement in its own (implicit)
-- transaction: the rail's write lock in shared mode (hashtextextended of p_lock, as
-- tracker_client/postgres/db.py takes it), the call, then pg_notify on p_notify and, while an
-- instance follows (a live followers row), on p_follow; a NULL channel sends nothing. An
-- exception (SQLSTATE BW001: the caller's embedded path answers it) rolls everything back.
CREATE FUNCTION bw_wake(p_notify TEXT, p_follow TEXT, p_instance TEXT)
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_notify, p_instance);
    END IF;
    IF p_follow IS NOT NULL AND EXISTS (SELECT 1 FROM followers WHERE expires_at > clock_timestamp())
    THEN
        PERFORM pg_notify(p_follow, p_instance);
    END IF;
END
$$;

-- bw_claim (schema 7) under the lock; the run, lease and token-hash arrays come as array
-- literals of hex and uuid text.
CREATE FUNCTION bw_claim_tx(
    p_lock TEXT, p_notify TEXT, p_follow TEXT, p_instance TEXT,
    p_op TEXT, p_role TEXT, p_agent TEXT, p_now BIGINT, p_ttl BIGINT, p_runs TEXT,
    p_leases TEXT, p_tokens TEXT, p_key TEXT, p_fp TEXT
) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_lock, 0));
    RETURN QUERY SELECT * FROM bw_claim(
        p_op, p_role, p_agent, p_now, p_ttl, p_runs::text[], p_leases::text[], p_tokens::text[],
        p_key, p_fp);
    PERFORM bw_wake(p_notify, p_follow, p_instance);
END
$$;

-- bw_transition (schema 6) under the lock.
CREATE FUNCTION bw_transition_tx(
    p_lock TEXT, p_notify TEXT, p_follow TEXT, p_instance TEXT,
    p_run TEXT, p_token TEXT, p_pipeline TEXT, p_stage TEXT, p_version BIGINT, p_to TEXT,
    p_role TEXT, p_terminal BIGINT, p_usage TEXT, p_event TEXT, p_now BIGINT, p_key TEXT,
    p_fp TEXT, p_result TEXT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    done BOOLEAN;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_lock, 0));
    done := bw_transition(p_run, p_token, p_pipeline, p_stage, p_version, p_to, p_role,
        p_terminal, p_usage, p_event, p_now, p_key, p_fp, p_result);
    PERFORM bw_wake(p_notify, p_follow, p_instance);
    RETURN done;
END
$$;

-- bw_move (schema 8) per item of p_items, a JSON array of objects with bw_move's fields (run,
-- token, pipeline, stage, version, to, role, terminal, usage, event, key, fp, result), under
-- the lock; per item, whether it was written.
CREATE FUNCTION bw_finish_many_tx(
    p_lock TEXT, p_notify TEXT, p_follow TEXT, p_instance TEXT, p_now BIGINT, p_items JSONB
) RETURNS BOOLEAN[] LANGUAGE plpgsql AS $$
DECLARE
    item JSONB;
    done BOOLEAN[] := '{}';
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_lock, 0));
    FOR item IN SELECT value FROM jsonb_array_elements(p_items) LOOP
        done := done || bw_move(
            'finish', item ->> 'run', item ->> 'token', item ->> 'pipeline', item ->> 'stage',
            (item ->> 'version')::bigint, item ->> 'to', item ->> 'role',
            (item ->> 'terminal')::bigint, item ->> 'usage', item ->> 'event', p_now,
            item ->> 'key', item ->> 'fp', item ->> 'result');
    END LOOP;
    PERFORM bw_wake(p_notify, p_follow, p_instance);
    RETURN done;
END
$$;
