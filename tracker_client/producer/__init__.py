"""The producer API: put work on the rail from application code, async or blocking.

``async with connect(url, token=...) as rail: await rail.submit("review", "title")`` and
``with connect_sync(url, token=...) as rail: rail.submit(...)``. It touches the tracker only.
"""

from tracker_client.producer.options import Submission
from tracker_client.producer.rail import Rail, connect
from tracker_client.producer.sync import SyncRail, connect_sync

__all__ = ["Rail", "Submission", "SyncRail", "connect", "connect_sync"]
