-- finish_many: the batch is written inside one savepoint of the one transaction; when an item
-- is refused, that is rolled back and each item is written inside a savepoint of its own,
-- released, or rolled back alone (rules/finish_many.py).

-- name: finish_many.savepoint
SAVEPOINT finish_item;

-- name: finish_many.rollback_item
ROLLBACK TO SAVEPOINT finish_item;

-- name: finish_many.release_item
RELEASE SAVEPOINT finish_item;


-- name: finish_many.savepoint_batch
SAVEPOINT finish_batch;

-- name: finish_many.rollback_batch
ROLLBACK TO SAVEPOINT finish_batch;

-- name: finish_many.release_batch
RELEASE SAVEPOINT finish_batch;
