-- Schema version 16 of the PostgreSQL rail: budgets for agent loops (docs/operate/budgets.md).
-- additive
-- `budgets`: the task's own budget settings as given at submit (JSON, only the keys given; NULL:
-- none, the pipeline's and the rail's defaults apply). `spent_usd`/`spent_tokens`: the cost its
-- runs reported, summed by the rail (tracker_client/rules/budgets.py). `visits`: how many times
-- the task entered each stage that lies on a loop of its pipeline (JSON; NULL: none recorded
-- yet). `budget_base`: where a requeue restarted the count (JSON {at_ms, usd, tokens}; NULL:
-- counted from creation). `budget_stop`: the figures of the budget that dead-lettered it
-- ("loops 3 of 3 in stage review"; NULL: none). Older workers never read nor write them.
ALTER TABLE tasks ADD COLUMN budgets TEXT;
ALTER TABLE tasks ADD COLUMN spent_usd DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN spent_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN visits TEXT;
ALTER TABLE tasks ADD COLUMN budget_base TEXT;
ALTER TABLE tasks ADD COLUMN budget_stop TEXT;
