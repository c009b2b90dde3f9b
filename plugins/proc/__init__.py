"""Child processes of executors: spawning, output capture, environment, the masking of the
secrets a child was given in what comes back (:mod:`plugins.proc.redact`), and the orphan guard.

Its modules may touch processes (spawn, signal, reap), their pipes, ``/proc`` and the environment
children are built from; they know nothing of executors' options, the tracker or the worker
(:mod:`tracker_client.errors` is their one import from the rail).
"""
