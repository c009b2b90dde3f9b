"""What a tracker can do, declared by the tracker itself, and the small lease reference.

Callers (the worker, the operator CLI, the contract suite) read one typed
:class:`Capabilities` object from ``await tracker.capabilities()`` instead of probing
attributes with ``getattr``. The defaults describe a plain NullTickets server: nothing beyond
NullTickets' documented API (docs/guarantees/nulltickets.md), answers that can be lost on the
wire, a lease reset to 300 s by every heartbeat.

:class:`LeaseRef` is what a lease operation needs (lease id, run id, task id, token). A claimed
:class:`~tracker_client.models.Lease` is one; :class:`LeaseHandle` is the small concrete one a
server builds from a path and a Bearer header, with no task to fabricate.

No I/O, and it imports nothing of the project (pydantic only), so every floor may use it.

Partly public (docs/reference/stability.md): ``Capabilities`` is on the Python API reference
(``Rail.capabilities()`` answers it); the lease references are internal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from pydantic import SecretStr

__all__ = [
    "EMBEDDED",
    "NULLTICKETS",
    "NULLTICKETS_LEASE_TTL_MS",
    "Capabilities",
    "LeaseHandle",
    "LeaseRef",
]

#: A NullTickets heartbeat resets a lease to this TTL whatever was asked
#: (docs/guarantees/nulltickets.md).
NULLTICKETS_LEASE_TTL_MS = 300_000


@dataclass(frozen=True)
class Capabilities:
    """The optional parts of the ``Tracker`` protocol a tracker really has.

    Each flag names a group of operations or rules of docs/guarantees/backlog.md; an operation of a
    group the tracker lacks raises ``Unsupported`` (or, where the protocol says so, degrades as
    documented, e.g. ``release`` leaving the lease to expire).
    """

    #: A write can commit while its answer is lost (HTTP): callers send idempotency keys.
    #: False where the commit and the answer happen in the caller's process (embedded).
    answers_can_be_lost: bool = True
    #: The longest lease that survives a heartbeat (None: whatever TTL is asked is kept).
    max_lease_ttl_ms: int | None = NULLTICKETS_LEASE_TTL_MS
    #: The largest request the tracker accepts (None: no wire, no limit).
    max_request_bytes: int | None = None
    #: ``cancel``, ``cancel_all``, ``requeue`` and ``maintenance`` work.
    backlog_ops: bool = False
    #: ``wait`` and ``wait_for_work`` are answered by the tracker (not by polling).
    wait: bool = False
    #: Every run is listed with its error and usage, ``FailResult`` says what happened, and
    #: ``list_task_events`` works.
    run_details: bool = False
    #: Task extensions are honoured: concurrency keys, queue TTLs, exponential backoff,
    #: ``max_stale_attempts``, ``fail(retryable=False)``.
    task_extensions: bool = False
    #: ``release`` gives the task back at once (else the lease is left to expire).
    release: bool = False
    #: The tracker refuses definitions that strand tasks and requeues into a terminal stage.
    strict_definitions: bool = False
    #: Oversized event data is refused (``ValidationFailed``) rather than trimmed by the client.
    strict_limits: bool = False
    #: Names of the extension operations the tracker serves (a served rail's ``/health``).
    extensions: frozenset[str] = field(default_factory=frozenset)


#: A plain NullTickets server: the defaults.
NULLTICKETS = Capabilities()

#: The embedded SQLite tracker: everything, in-process.
EMBEDDED = Capabilities(
    answers_can_be_lost=False,
    max_lease_ttl_ms=None,
    backlog_ops=True,
    wait=True,
    run_details=True,
    task_extensions=True,
    release=True,
    strict_definitions=True,
    strict_limits=True,
    extensions=frozenset({"follow", "workers", "spans"})
    | frozenset({"subtasks", "fan_in", "upstream", "checkpoints", "human_steps"})
    | frozenset({"claim_many", "finish", "finish_many"}),
)


@runtime_checkable
class LeaseRef(Protocol):
    """What a lease operation needs: the lease, its run, its task and the secret token."""

    @property
    def lease_id(self) -> str:
        """The lease's id (NullTickets' ``lease_id``)."""
        ...

    @property
    def run_id(self) -> str:
        """The run the lease writes to (events, transition, fail)."""
        ...

    @property
    def task_id(self) -> str:
        """The claimed task (empty when unknown, e.g. a server that only has the run id)."""
        ...

    @property
    def lease_token(self) -> SecretStr:
        """The lease token: a secret, never printed."""
        ...


class LeaseHandle(NamedTuple):
    """A concrete :class:`LeaseRef` without the claimed task (a server builds one per request)."""

    lease_id: str
    run_id: str
    lease_token: SecretStr
    task_id: str = ""
