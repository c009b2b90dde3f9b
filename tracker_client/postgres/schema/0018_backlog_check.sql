-- additive
-- Schema version 18 of the PostgreSQL rail: the backlog cap checked inside the create's own
-- round trip (docs/guarantees/backlog.md, "Backlog caps"; docs/benchmarks.md, "Pickup latency").
-- A create used to read the role's whole depth (a count of every waiting task of the role) and
-- compare it with the cap in Python: one round trip more per create, and a count that grew with
-- the backlog. bw_backlog_check runs as a statement nobody reads, sent with the insert and the
-- COMMIT: it counts at most the rows that decide (LIMIT cap - n + 1, on the partial index
-- tasks_claim) and, only when the cap would be passed, the exact depth for the refusal, raised as
-- SQLSTATE BW002 with the role, the depth and the cap as JSON in its DETAIL (the caller raises
-- BacklogFull from it; the transaction is rolled back, nothing written).
CREATE FUNCTION bw_backlog_check(p_role TEXT, p_now BIGINT, p_n BIGINT, p_cap BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    found_n BIGINT;
BEGIN
    IF p_role IS NULL OR p_cap <= 0 THEN
        RETURN;
    END IF;
    SELECT count(*) INTO found_n FROM (
        SELECT 1 FROM tasks
        WHERE role = p_role AND dead_letter_reason IS NULL AND terminal = 0
          AND lease_expires_at_ms <= p_now
        LIMIT greatest(p_cap - p_n + 1, 0)
    ) waiting;
    IF found_n + p_n <= p_cap THEN
        RETURN;
    END IF;
    SELECT count(*) INTO found_n FROM tasks
    WHERE role = p_role AND dead_letter_reason IS NULL AND terminal = 0
      AND lease_expires_at_ms <= p_now;
    RAISE EXCEPTION 'backlog of role % is full: % waiting, cap %', p_role, found_n, p_cap
        USING ERRCODE = 'BW002',
              DETAIL = jsonb_build_object('role', p_role, 'depth', found_n, 'cap', p_cap)::text;
END
$$;

-- A create gathered whole on the event loop (tracker_client/postgres/dialect.py, OneTrip) takes
-- its pipeline's version from the process's cache instead of reading it first, and sends this
-- with the insert: SQLSTATE BW001 (the create is rolled back and runs again the rail's way,
-- reading the version) unless pipeline p_id is at version p_version now.
CREATE FUNCTION bw_pipeline_is(p_id TEXT, p_version BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pipelines WHERE id = p_id AND version = p_version) THEN
        RAISE EXCEPTION 'create: pipeline % is no longer at version %', p_id, p_version
            USING ERRCODE = 'BW001';
    END IF;
END
$$;
