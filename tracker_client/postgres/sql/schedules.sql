-- schedules: periodic schedules and the firing of their ticks (rules/schedules.py).

-- name: schedules.get
SELECT * FROM schedules WHERE name = %s;

-- name: schedules.list
SELECT * FROM schedules ORDER BY name;

-- The earliest tick not fired yet of an unpaused schedule (maintenance's cheap read).
-- name: schedules.next_due
SELECT min(next_tick_ms) FROM schedules WHERE paused = 0;

-- name: schedules.insert
INSERT INTO schedules (name, pipeline_id, cron, timezone, title, metadata,
    priority, missed, next_tick_ms, created_at_ms, updated_at_ms)
VALUES (%(name)s, %(pipeline_id)s, %(cron)s, %(timezone)s, %(title)s, %(metadata)s,
    %(priority)s, %(missed)s, %(next_tick_ms)s, %(now)s, %(now)s);

-- name: schedules.replace
UPDATE schedules SET pipeline_id = %(pipeline_id)s, cron = %(cron)s, timezone = %(timezone)s,
    title = %(title)s, metadata = %(metadata)s, priority = %(priority)s, missed = %(missed)s,
    next_tick_ms = %(next_tick_ms)s, updated_at_ms = %(now)s
WHERE name = %(name)s;

-- name: schedules.set_paused
UPDATE schedules SET paused = %s, next_tick_ms = %s, updated_at_ms = %s WHERE name = %s;

-- name: schedules.delete
DELETE FROM schedules WHERE name = %s;

-- One tick's task is made in a savepoint: a refused task is noted, the tick passes.
-- name: schedules.tick_begin
SAVEPOINT schedule_tick;

-- name: schedules.tick_undo
ROLLBACK TO SAVEPOINT schedule_tick;

-- name: schedules.tick_end
RELEASE SAVEPOINT schedule_tick;

-- name: schedules.tick_failed
UPDATE schedules SET last_error = %s WHERE name = %s;

-- name: schedules.tick_made
UPDATE schedules SET last_tick_ms = %s, last_task_id = %s, tasks_created = tasks_created + 1,
    last_error = NULL
WHERE name = %s;

-- Advance a schedule past its fired ticks: a compare-and-set on the old next tick.
-- name: schedules.advance
UPDATE schedules SET next_tick_ms = %s, updated_at_ms = %s
WHERE name = %s AND next_tick_ms = %s AND paused = 0;

-- name: schedules.due
SELECT * FROM schedules WHERE paused = 0 AND next_tick_ms <= %s ORDER BY next_tick_ms;

-- One schedule's ticks are fired in a savepoint: one that cannot compute them is paused.
-- name: schedules.fire_begin
SAVEPOINT schedule_fire;

-- name: schedules.fire_undo
ROLLBACK TO SAVEPOINT schedule_fire;

-- name: schedules.fire_end
RELEASE SAVEPOINT schedule_fire;

-- name: schedules.pause_broken
UPDATE schedules SET paused = 1, last_error = %s, updated_at_ms = %s WHERE name = %s;
