-- standing: an idle parked claim the create that brings its work claims for (schema 21,
-- postgres/standing.py).

-- A create's offer to the standing claims of the roles of the tasks it inserted (their ids),
-- at the create's now: sent with the create, nothing read back (bw_hand_off never raises for a
-- claim). It also notes, for standing.grants, whether any claim stood when it began (the
-- statement's snapshot: the hand-off's deletes are not in it): with none, nothing was granted
-- and standing.grants looks no task up.
-- name: standing.offer
-- only: postgres
-- deferred
-- prepared: _bw_offer
SELECT bw_hand_off(%s::text[], %s::bigint),
    set_config('backlog_worker.stood', (EXISTS (SELECT 1 FROM standing_claims))::text, true);

-- A standing claim's own claim, with bw_claim_tx's parameters (claim.many_tx): the leases a
-- create recorded under the key, read, or else the claim.
-- name: standing.claim_tx
-- only: postgres
SELECT * FROM bw_stand_claim_tx(%s::text, %s::text, %s::text, %s::text, %s::text, %s::text,
    %s::text, %s::bigint, %s::bigint, %s::text, %s::text, %s::text, %s::text, %s::text);

-- The leases this create's offer granted (its tasks leased in its own transaction: the offer
-- is the only claim between the insert and here), sent at commit as ONE NOTIFY on the rail's
-- grant channel (bw_grant_channel(): named by the server from the rail's key, so no statement
-- a client sends holds the name, schema 23): the rows as JSON without their token digest, so
-- a woken standing claim starts without reading them; no token is in it. Nothing is sent for
-- no grant, or for rows too large for a NOTIFY (the woken claim reads them).
-- name: standing.grants
-- only: postgres
-- deferred
-- prepared: _bw_grants
SELECT pg_notify(c.channel, g.rows) FROM (SELECT bw_grant_channel() AS channel) c, (
    SELECT json_agg(to_jsonb(t) - 'lease_token_sha256')::text AS rows FROM tasks t
    WHERE current_setting('backlog_worker.stood', true) = 'true'
      AND t.id = ANY (%s::text[]) AND t.lease_run_id IS NOT NULL
) g
WHERE c.channel IS NOT NULL AND g.rows IS NOT NULL AND octet_length(g.rows) < 7900;
