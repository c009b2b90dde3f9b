-- The claim: pick the best eligible task of a role and lease it, in ONE statement.
--
-- The statement is the function bw_claim_one (schema/0007_claim_function.sql, where its rules
-- are spelled out: the embedded claim's ordering, assignment, dependency, concurrency-key and
-- per_state rules, FOR UPDATE SKIP LOCKED over the claimable partial index, the run inserted
-- and the lease's token SHA-256 set in the same statement); plpgsql keeps its plan.
--
-- Parameters: role, agent, now, expires, ttl, limits (a JSON object stage -> limit, '{}' when
-- none), run_id, lease_id, token_sha256 (only the token's SHA-256 is stored).
-- name: claim.one
-- only: postgres
SELECT * FROM bw_claim_one(
    %(role)s::text, %(agent)s::text, %(now)s::bigint, %(expires)s::bigint, %(ttl)s::bigint,
    %(limits)s::jsonb, %(run_id)s::text, %(lease_id)s::text, %(token_sha256)s::text)
