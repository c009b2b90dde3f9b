"""Tracker clients: the :class:`Tracker` protocol, its models and errors, and its implementations.

``open_tracker(url)`` picks the implementation from a URL: ``sqlite:///path/to.db`` (or a bare
path, or ``sqlite:///:memory:``) for the embedded tracker, ``http(s)://...`` for NullTickets.
"""

from typing import TYPE_CHECKING, Any

from tracker_client.errors import *  # noqa: F403
from tracker_client.models import *  # noqa: F403
from tracker_client.protocol import Tracker

if TYPE_CHECKING:
    from tracker_client.producer import Rail, Submission, SyncRail, connect, connect_sync

#: The producer API, imported on first use: a worker never needs it (it pulls in the agent
#: models and difflib, ~1 MiB of a worker's RSS).
_PRODUCER = ("Rail", "Submission", "SyncRail", "connect", "connect_sync")


def __getattr__(name: str) -> Any:
    """The producer API's names, imported from :mod:`tracker_client.producer` when first used."""
    if name in _PRODUCER:
        from tracker_client import producer

        return getattr(producer, name)
    raise AttributeError(f"module 'tracker_client' has no attribute {name!r}")


__all__ = ["Rail", "Submission", "SyncRail", "Tracker", "connect", "connect_sync"]
