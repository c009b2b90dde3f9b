-- idempotency: an operation's answer recorded under its key, replayed on a retry
-- (rules/idempotency.py).

-- name: idempotency.find
SELECT fingerprint, result FROM idempotency WHERE key = %s AND operation = %s;

-- name: idempotency.record
-- shared
-- deferred
INSERT INTO idempotency (key, operation, fingerprint, result, created_at_ms)
VALUES (%s, %s, %s, %s, %s);

