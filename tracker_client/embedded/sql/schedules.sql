-- schedules: periodic schedules and the firing of their ticks (rules/schedules.py).

-- name: schedules.get
SELECT * FROM schedules WHERE name = ?;

-- name: schedules.list
SELECT * FROM schedules ORDER BY name;

-- The earliest tick not fired yet of an unpaused schedule (maintenance's cheap read).
-- name: schedules.next_due
SELECT min(next_tick_ms) FROM schedules WHERE paused = 0;

-- name: schedules.insert
INSERT INTO schedules (name, pipeline_id, cron, timezone, title, metadata,
    priority, missed, next_tick_ms, created_at_ms, updated_at_ms)
VALUES (:name, :pipeline_id, :cron, :timezone, :title, :metadata, :priority, :missed,
    :next_tick_ms, :now, :now);

-- name: schedules.replace
UPDATE schedules SET pipeline_id = :pipeline_id, cron = :cron, timezone = :timezone,
    title = :title, metadata = :metadata, priority = :priority, missed = :missed,
    next_tick_ms = :next_tick_ms, updated_at_ms = :now
WHERE name = :name;

-- name: schedules.set_paused
UPDATE schedules SET paused = ?, next_tick_ms = ?, updated_at_ms = ? WHERE name = ?;

-- name: schedules.delete
DELETE FROM schedules WHERE name = ?;

-- One tick's task is made in a savepoint: a refused task is noted, the tick passes.
-- name: schedules.tick_begin
SAVEPOINT schedule_tick;

-- name: schedules.tick_undo
ROLLBACK TO schedule_tick;

-- name: schedules.tick_end
RELEASE schedule_tick;

-- name: schedules.tick_failed
UPDATE schedules SET last_error = ? WHERE name = ?;

-- name: schedules.tick_made
UPDATE schedules SET last_tick_ms = ?, last_task_id = ?, tasks_created = tasks_created + 1,
    last_error = NULL
WHERE name = ?;

-- Advance a schedule past its fired ticks: a compare-and-set on the old next tick.
-- name: schedules.advance
UPDATE schedules SET next_tick_ms = ?, updated_at_ms = ?
WHERE name = ? AND next_tick_ms = ? AND paused = 0;

-- name: schedules.due
SELECT * FROM schedules WHERE paused = 0 AND next_tick_ms <= ? ORDER BY next_tick_ms;

-- One schedule's ticks are fired in a savepoint: one that cannot compute them is paused.
-- name: schedules.fire_begin
SAVEPOINT schedule_fire;

-- name: schedules.fire_undo
ROLLBACK TO schedule_fire;

-- name: schedules.fire_end
RELEASE schedule_fire;

-- name: schedules.pause_broken
UPDATE schedules SET paused = 1, last_error = ?, updated_at_ms = ? WHERE name = ?;
