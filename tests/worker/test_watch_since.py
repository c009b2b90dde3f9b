"""A submit landing while the worker's watch pauses between two waits (worker/daemon/watch.py)
still wakes the idle claim loop: each wait passes back the change mark the previous one answered.

The watcher's rail never looks by itself within the test's bound (an embedded poll of 30 s, a
PostgreSQL safety tick of 30 s) and the idle wait lasts 30 s, so a wake-up inside the 20 s bound
can only come from the mark. The pause is widened to 3 s so the submit lands inside it on any
machine; before the mark, the wait after the pause began after the submit and slept through it.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from tests.contract.support import make_pipeline, new_task
from tracker_client.factory import open_tracker
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.protocol import Tracker
from tracker_client.serve.app import create_app
from worker.daemon import watch as watch_module
from worker.daemon.watch import TrackerWatch

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

#: The watch's pause after a wake-up, widened from 50 ms: the second submit lands inside it.
WIDE_PAUSE_S = 3.0


async def submit_during_the_pause_wakes(
    watched: Tracker, writer: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two submits by ``writer``: the first wakes the idle wait on ``watched``'s watch, the
    second lands in the pause that follows and must wake the next idle wait too."""
    monkeypatch.setattr(watch_module, "WATCH_MIN_GAP_S", WIDE_PAUSE_S)
    pipeline_id = await make_pipeline(writer)
    await watched.wait_for_work(0)  # binds the wake-up listener (socket, LISTEN)
    watch = TrackerWatch(watched, poke=lambda: None)
    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        for title in ("first", "second, during the pause"):
            watch.forget()  # a claim round begins (and finds nothing)
            woken = anyio.Event()

            async def idle(done: anyio.Event = woken) -> None:
                await watch.wait(30)
                done.set()

            tg.start_soon(idle)
            await anyio.wait_all_tasks_blocked()
            await writer.create_task(new_task(pipeline_id, title))
            with anyio.fail_after(20):
                await woken.wait()
        assert watch.wakeups >= 2
        tg.cancel_scope.cancel()


async def test_embedded_submit_during_the_pause_wakes_the_idle_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/rail.db?poll_interval_s=30"
    watched, writer = await open_tracker(url), await open_tracker(url)
    try:
        await submit_during_the_pause_wakes(watched, writer, monkeypatch)
    finally:
        await watched.aclose()
        await writer.aclose()


async def test_served_submit_during_the_pause_wakes_the_idle_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the served rail the mark is the server's generation as the long poll's answer
    carried it: the next long poll answers at once for a write served after it."""
    rail = await open_tracker(f"sqlite:///{tmp_path}/rail.db?poll_interval_s=30")
    app = create_app(rail)
    watched = RemoteTracker("http://127.0.0.1:7700", transport=httpx.ASGITransport(app=app))
    writer = RemoteTracker("http://127.0.0.1:7700", transport=httpx.ASGITransport(app=app))
    try:
        await submit_during_the_pause_wakes(watched, writer, monkeypatch)
    finally:
        await watched.aclose()
        await writer.aclose()
        await rail.aclose()
