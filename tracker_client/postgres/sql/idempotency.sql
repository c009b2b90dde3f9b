-- idempotency: an operation's answer recorded under its key, replayed on a retry
-- (rules/idempotency.py).

-- name: idempotency.find
SELECT fingerprint, result FROM idempotency WHERE key = %s AND operation = %s;

-- Whether an answer is recorded under any of a batch's keys (a JSON array): one look for a
-- finish_many's keyed items, each key a primary-key probe (rules/finish_many.py).
-- name: idempotency.any_recorded
SELECT 1 FROM idempotency
WHERE key IN (SELECT jsonb_array_elements_text(%s::jsonb)) AND operation = %s LIMIT 1;

-- Whether an answer is recorded under a key (the served rail lets a retry of a gone lease's
-- write through to replay it: serve/helpers.py).
-- name: idempotency.recorded
SELECT 1 FROM idempotency WHERE key = %s AND operation = %s;

-- name: idempotency.record
-- shared
-- deferred
INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
VALUES (%s, %s, %s, %s, %s);

