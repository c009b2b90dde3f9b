"""Tracker clients: the :class:`Tracker` protocol, its models and errors, and its implementations.

``open_tracker(url)`` picks the implementation from a URL: ``sqlite:///path/to.db`` (or a bare
path, or ``sqlite:///:memory:``) for the embedded tracker, ``http(s)://...`` for NullTickets.
"""

from tracker_client.errors import *  # noqa: F403
from tracker_client.models import *  # noqa: F403
from tracker_client.producer import Rail, Submission, SyncRail, connect, connect_sync
from tracker_client.protocol import Tracker

__all__ = ["Rail", "Submission", "SyncRail", "Tracker", "connect", "connect_sync"]
