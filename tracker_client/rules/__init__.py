"""The rules of the rail, written once: docs/guarantees/backlog.md in Python.

Every engine (the embedded SQLite file, PostgreSQL) runs the same functions here inside one of
its transactions, through a :class:`~tracker_client.rules.common.Ctx`: claims and leases, runs
and transitions, retries, dependencies and fan-in, concurrency keys and rate limits, schedules,
the store, retention. The functions speak SQL only by statement name; each engine keeps its own
statements, in its own dialect, as data (``sql/*.sql`` beside the engine).
"""
