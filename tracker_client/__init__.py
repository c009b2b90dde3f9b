"""The rail: the producer API an application imports, and the trackers behind it.

Public (docs/reference/stability.md): the producer API exported here (``connect``,
``connect_sync``, :class:`Rail`, :class:`SyncRail`, :class:`Submission`, the same as
:mod:`tracker_client.producer`), the error tree (:mod:`tracker_client.errors`) and the data
models the producer answers with, as the API reference lists them. Everything else in this
package (the ``Tracker`` protocol, the rails, the HTTP client and server, the contract) is
internal and may change in any release.
"""

import warnings
from typing import TYPE_CHECKING, Any

from tracker_client import models as _models
from tracker_client.errors import *  # noqa: F403

if TYPE_CHECKING:
    from tracker_client.models import *  # noqa: F403
    from tracker_client.producer import Rail, Submission, SyncRail, connect, connect_sync

#: The producer API, imported on first use: a worker never needs it (it pulls in the agent
#: models and difflib, ~1 MiB of a worker's RSS).
_PRODUCER = ("Rail", "Submission", "SyncRail", "connect", "connect_sync")


def __getattr__(name: str) -> Any:
    """The producer API's names, imported from :mod:`tracker_client.producer` when first used;
    the data models, as :mod:`tracker_client.models` has them (those a worker never builds are
    created on first use there); ``Tracker``, deprecated (docs/reference/stability.md), with a
    warning."""
    if name in _PRODUCER:
        from tracker_client import producer

        return getattr(producer, name)
    if name in _models.__all__:
        return getattr(_models, name)
    if name == "Tracker":
        warnings.warn(
            "tracker_client.Tracker is internal and leaves tracker_client in 0.2: an application "
            "uses connect()/Rail (docs/reference/stability.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        from tracker_client.protocol import Tracker

        return Tracker
    raise AttributeError(f"module 'tracker_client' has no attribute {name!r}")


__all__ = ["Rail", "Submission", "SyncRail", "connect", "connect_sync"]
