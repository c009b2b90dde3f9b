"""``worker.run.scopes.ScopeMaker``: each run's cancel scope, made from the class of the first.

What is pinned: every scope it makes is a new anyio cancel scope of the running backend (on
asyncio and on trio), a shielded one shields, and cancelling one cancels its body.
"""

from __future__ import annotations

import anyio
import pytest

from worker.run.scopes import ScopeMaker


async def _check() -> tuple[bool, bool, bool]:
    make = ScopeMaker()
    first, second = make(), make()
    same_kind = type(first) is type(second) is type(anyio.CancelScope())
    assert first is not second and isinstance(second, anyio.CancelScope)
    with second:
        second.cancel()
        await anyio.sleep(1)  # cancelled at once
    with anyio.CancelScope() as outer:
        outer.cancel()
        with make(shield=True) as shielded:
            await anyio.sleep(0.01)  # the outer cancel does not reach it
    return same_kind, second.cancelled_caught, not shielded.cancelled_caught


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_scopes_are_the_running_backends_and_behave_as_anyios(backend: str) -> None:
    if backend == "trio":
        pytest.importorskip("trio", minversion="0.26")
    assert anyio.run(_check, backend=backend) == (True, True, True)
