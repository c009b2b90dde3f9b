"""The embedded tracker: the NullTickets contract on a local SQLite file, minus its traps.

``await EmbeddedTracker.open("/path/backlog.db")`` (or ``open_tracker("sqlite:///...")``). Several
processes may share one file (WAL, ``BEGIN IMMEDIATE`` for every write, a busy timeout); SQLite
work runs on one dedicated thread per instance, never on the event loop. The schema is versioned
with numbered migrations in ``schema/``; a file that is not ours, corrupt, or from a newer version
is refused with ``TrackerCorrupt`` and never modified.
"""

from __future__ import annotations

from tracker_client.embedded.tracker import EmbeddedTracker

__all__ = ["EmbeddedTracker"]
