"""Child processes of executors: spawning, output capture, environment, and the orphan guard."""
