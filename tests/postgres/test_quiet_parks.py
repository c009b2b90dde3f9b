"""An idle worker's parks on a rail whose parked claim waits quietly
(``ParksClaims.quiet_parks``, the PostgreSQL rail: docs/benchmarks/pickup.md) start
from half the ceiling, the back-off's or the longest quiet park if longer (within the
watchdog's quiet period); on a rail that does not declare it (the embedded rail's own parked
claim, like the served one) they double up from ``idle_min_s`` as before."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.contract.support import make_pipeline
from tests.postgres.server import PgServer, fresh_schema_url
from tests.worker.conftest import role, start_worker, wait_until, worker_config
from tracker_client.capabilities import Capabilities
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker
from worker.daemon.pacing import QUIET_PARK_S
from worker.daemon.worker import Worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

IDLE_MIN_S, IDLE_MAX_S = 0.01, 0.4


class ParksRecorded:
    """The real rail, declaring ``parked_claim``, with each parked claim's wait recorded."""

    def __init__(self, inner: Tracker) -> None:
        self._inner = inner
        self.waits_ms: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def capabilities(self) -> Capabilities:
        caps = await self._inner.capabilities()
        return dataclasses.replace(caps, extensions=caps.extensions | {"parked_claim"})

    async def parked_claim(self, *args: Any, **kwargs: Any) -> Any:
        self.waits_ms.append(args[4] if len(args) > 4 else kwargs["wait_ms"])
        return await self._inner.parked_claim(*args, **kwargs)


async def _first_parks(rail: Tracker, parks: int = 3) -> tuple[list[int], float]:
    """The waits of an idle worker's first ``parks`` parked claims on ``rail``, and its
    watchdog's quiet period."""
    await make_pipeline(rail)
    recorded = ParksRecorded(rail)
    config = worker_config(idle_min_s=IDLE_MIN_S, idle_max_s=IDLE_MAX_S, drain=False)
    worker = Worker(recorded, config, [role("coder", lambda ctx: anyio.sleep(0))])  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: len(recorded.waits_ms) >= parks)
        worker.stop()
    return recorded.waits_ms[:parks], worker.progress.stall_after_s


async def test_an_idle_worker_parks_from_half_the_longest_quiet_park_on_postgresql(
    pg_server: PgServer,
) -> None:
    rail = await open_tracker(fresh_schema_url(f"quiet-{uuid.uuid4()}"))
    try:
        [wait], quiet_s = await _first_parks(rail, parks=1)
    finally:
        await rail.aclose()
    # a draw between half the longest quiet park and all of it, from the first idle round (the
    # back-off's ceiling is shorter); within half the watchdog's quiet period
    longest_ms = min(QUIET_PARK_S, quiet_s / 2) * 1000
    assert IDLE_MAX_S * 1000 < longest_ms / 2 <= wait <= longest_ms, (wait, longest_ms)


async def test_a_rail_without_quiet_parks_keeps_the_doubling_back_off(tmp_path: Path) -> None:
    rail = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        waits, _ = await _first_parks(rail)
    finally:
        await rail.aclose()
    # the first idle round parks for idle_min_s (10-20 ms with its jitter), then it doubles
    assert waits[0] < IDLE_MAX_S * 500 and waits == sorted(waits), waits
