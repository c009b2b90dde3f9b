-- leasekeys: the rail's key lease tokens of keyed claims are derived with (rules/leasekeys.py).

-- name: leasekeys.read
SELECT value FROM rail_secrets WHERE name = %s;

-- The key is made when the schema is migrated (postgres/migrate.py), by the server; this runs
-- only for a rail whose row was deleted since its open. The value the rules send is mixed with
-- the server's own randomness (SHA-256 of it and two gen_random_uuid()), so a server's statement
-- log, which shows parameters, never holds the key.
-- name: leasekeys.make
INSERT INTO rail_secrets (name, value)
VALUES (%s, encode(sha256(
    uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) || decode(%s, 'hex')
), 'hex'))
ON CONFLICT (name) DO NOTHING;
