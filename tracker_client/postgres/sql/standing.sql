-- standing: an idle parked claim the create that brings its work claims for (schema 21,
-- postgres/standing.py).

-- A create's offer to the standing claims of the roles of the tasks it inserted (their ids),
-- at the create's now: sent with the create, nothing read back (bw_hand_off never raises for a
-- claim).
-- name: standing.offer
-- only: postgres
-- deferred
-- prepared: _bw_hand_off
SELECT bw_hand_off(%s::text[], %s::bigint);

-- A standing claim's own claim, with bw_claim_tx's parameters (claim.many_tx): the leases a
-- create recorded under the key, read, or else the claim.
-- name: standing.claim_tx
-- only: postgres
SELECT * FROM bw_stand_claim_tx(%s::text, %s::text, %s::text, %s::text, %s::text, %s::text,
    %s::text, %s::bigint, %s::bigint, %s::text, %s::text, %s::text, %s::text, %s::text);
