"""A PostgreSQL rail with an agent's first batch leased, and the reports that finish a batch:
where the tests of a ``finish_many`` and the claim beside it start (``test_pairing.py``,
``test_claim_ahead.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tests.contract.support import make_pipeline, new_task, simple_pipeline
from tests.postgres.server import fresh_schema_url
from tracker_client.contract.batch_models import FinishItem
from tracker_client.errors import TrackerUnavailable
from tracker_client.factory import open_tracker
from tracker_client.models import Lease
from tracker_client.postgres import pairing

OneCall = Callable[[str, Any, str], Awaitable[Any]]

_PLAIN = {"trigger": "complete"}


async def leased_rail(
    schema_key: str, tasks: int, key: str, **options: Any
) -> tuple[Any, str, list[Lease]]:
    """A tracker on a fresh schema (``options``: its URL's), ``tasks`` tasks of role ``coder``
    (``t0`` first), its URL, and the first 3 of them claimed by agent ``a`` under ``key``."""
    url = fresh_schema_url(schema_key, **options)
    tracker: Any = await open_tracker(url)
    pid = await make_pipeline(tracker, simple_pipeline())
    await tracker.create_tasks([new_task(pid, f"t{i}", priority=-i) for i in range(tasks)])
    leases = await tracker.claim_many("a", "coder", 60_000, 3, idempotency_key=key)
    return tracker, url, leases


def finish_items(leases: list[Lease], prefix: str) -> list[FinishItem]:
    """A ``finish_many``'s items completing ``leases``, keyed ``prefix`` and the item's index."""
    return [
        FinishItem(lease=x, transition=_PLAIN, idempotency_key=f"{prefix}{i}")
        for i, x in enumerate(leases)
    ]


def pair_answer_lost(real: OneCall) -> OneCall:
    """The engine's ``one_call`` ``real``, but a paired statement (:data:`pairing.PAIR_CALL`)
    is written and then its answer lost (``TrackerUnavailable``): a fault a real server can't
    be told to make."""

    async def lost(call: str, params: Any, where: str) -> Any:
        if call == pairing.PAIR_CALL:
            await real(call, params, where)  # written, and then the answer is lost
            raise TrackerUnavailable("connection lost", code="unavailable")
        return await real(call, params, where)

    return lost
