-- Schema version 23 of the PostgreSQL rail: the grant channel is named by the server.
-- additive
-- A create's grant to a standing claim travels in a NOTIFY on the rail's grant channel, whose
-- name derives from the rail's lease-token key (tracker_client/postgres/standing.py). Sent as a
-- statement's text or parameter, the name showed wherever statements show (pg_stat_activity and
-- pg_stat_statements to a monitoring role with pg_read_all_stats, a server log with
-- log_statement): such a role could LISTEN there and read the tasks granted. The server now
-- derives the name itself, from rail_secrets: bw_grant_channel() for the create's NOTIFY and
-- bw_listen_grants(schema) for the listening connection (which runs no statement in the
-- rail's schema otherwise), so it is in no statement a client sends.

-- The rail's grant channel: 'bwg_' and the first 40 hex digits of SHA-256 of 'grants:' and the
-- key's hex text (standing.grant_channel derives the same name); NULL without a key.
CREATE FUNCTION bw_grant_channel() RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT 'bwg_' || left(encode(sha256(convert_to('grants:' || value, 'UTF8')), 'hex'), 40)
    FROM rail_secrets WHERE name = 'lease_token_key'
$$;

-- LISTEN on the grant channel of the rail in schema p_schema (the listening connection has no
-- search_path of the rail's); false when the rail has no key yet.
CREATE FUNCTION bw_listen_grants(p_schema TEXT) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    v_key TEXT;
BEGIN
    EXECUTE format('SELECT value FROM %I.rail_secrets WHERE name = $1', p_schema)
        INTO v_key USING 'lease_token_key';
    IF v_key IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('LISTEN %I',
        'bwg_' || left(encode(sha256(convert_to('grants:' || v_key, 'UTF8')), 'hex'), 40));
    RETURN true;
END
$$;
