-- leasekeys: the rail's key lease tokens of keyed claims are derived with (rules/leasekeys.py).

-- name: leasekeys.read
SELECT value FROM rail_secrets WHERE name = %s;

-- name: leasekeys.make
INSERT INTO rail_secrets (name, value) VALUES (%s, %s) ON CONFLICT DO NOTHING;

