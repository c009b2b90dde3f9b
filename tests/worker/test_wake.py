"""The one-shot wake-up of the worker's per-run hand-offs (worker/wake.py), on asyncio (a
future) and on trio (anyio's event)."""

from __future__ import annotations

import anyio
import pytest

from worker.wake import Wake, running_loop

pytestmark = pytest.mark.timeout(30)

BACKENDS = ["asyncio", "trio"]


def _run(backend: str, fn) -> None:
    anyio.run(fn, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_set_wakes_the_waiter(backend: str) -> None:
    async def main() -> None:
        wake, woken = Wake(), []

        async def waiter() -> None:
            await wake.wait()
            woken.append(True)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.sleep(0.01)
                assert not woken and not wake.is_set()
                wake.set()
        assert woken == [True] and wake.is_set()

    _run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wake_set_before_the_wait_returns_at_once_and_a_second_set_is_a_no_op(
    backend: str,
) -> None:
    async def main() -> None:
        wake = Wake()
        wake.set()
        wake.set()
        with anyio.fail_after(5):
            await wake.wait()
        assert wake.is_set()

    _run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cancelled_waiter_is_cancelled_and_a_later_set_is_a_no_op(backend: str) -> None:
    async def main() -> None:
        wake = Wake()
        with anyio.move_on_after(0.01) as scope:
            await wake.wait()
        assert scope.cancelled_caught
        wake.set()  # nobody waits any more: nothing raised

    _run(backend, main)


def test_a_wake_made_with_the_loop_in_hand_binds_to_it() -> None:
    async def main() -> None:
        loop = running_loop()
        assert loop is not None
        wake = Wake(loop)  # the caller's loop: no lookup of its own
        assert not wake.is_set()
        wake.set()
        with anyio.fail_after(5):
            await wake.wait()
        assert wake.is_set()

    _run("asyncio", main)


def test_there_is_no_asyncio_loop_to_hold_under_trio() -> None:
    async def main() -> None:
        assert running_loop() is None
        wake = Wake(running_loop())  # anyio's event, as Wake() makes under trio
        wake.set()
        with anyio.fail_after(5):
            await wake.wait()

    _run("trio", main)
