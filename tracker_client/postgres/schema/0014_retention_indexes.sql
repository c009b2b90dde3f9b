-- Schema version 14 of the PostgreSQL rail: the dead-letter figures read dead letters only.
-- additive
-- queue_stats (tracker_client/rules/stats.py; the worker's drain check and its metrics refresh
-- call it) counted dead letters with a scan of every task, so its cost grew with the finished
-- work kept (200,000 finished tasks: ~14,400 pages read per call). A partial index on just
-- those rows answers it (docs/benchmarks.md, "Finished tasks kept"). The failed runs' count is
-- left a scan of runs on purpose: an index naming runs.status would make the finish's update
-- of its run (status, end, usage) a non-HOT one, a cost on every task.
CREATE INDEX tasks_dead ON tasks (pipeline_id, dead_letter_from_stage)
    WHERE dead_letter_reason IS NOT NULL;
