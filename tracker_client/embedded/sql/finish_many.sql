-- finish_many: each item is written inside a savepoint of the one transaction, released, or
-- rolled back alone (rules/finish_many.py).

-- name: finish_many.savepoint
SAVEPOINT finish_item;

-- name: finish_many.rollback_item
ROLLBACK TO SAVEPOINT finish_item;

-- name: finish_many.release_item
RELEASE SAVEPOINT finish_item;
