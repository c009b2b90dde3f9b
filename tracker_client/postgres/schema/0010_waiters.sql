-- Schema version 10 of the PostgreSQL rail: who waits for the rail's wake-ups.
-- One row per tracker instance with a waiter (a worker idle in wait_for_work, a caller of
-- wait), kept alive while it waits, on the server's clock (tracker_client/postgres/idle.py).
-- A write sends the rail channel's NOTIFY only while a live row exists: workers busy with work
-- are not woken by every report of every host (each NOTIFY wakes every listening backend and
-- its client at commit), and a busy rail pays one index probe per write instead.
CREATE TABLE waiters (
    instance TEXT PRIMARY KEY NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX waiters_expires ON waiters (expires_at);

CREATE OR REPLACE FUNCTION bw_wake(p_notify TEXT, p_follow TEXT, p_instance TEXT)
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    IF p_notify IS NOT NULL AND EXISTS (SELECT 1 FROM waiters WHERE expires_at > clock_timestamp())
    THEN
        PERFORM pg_notify(p_notify, p_instance);
    END IF;
    IF p_follow IS NOT NULL AND EXISTS (SELECT 1 FROM followers WHERE expires_at > clock_timestamp())
    THEN
        PERFORM pg_notify(p_follow, p_instance);
    END IF;
END
$$;
