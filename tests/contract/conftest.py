"""Fixtures of the contract suite: one ``tracker`` per registered implementation.

Like anyio's ``anyio_backend``, the ``tracker_impl`` fixture is parametrised over
:data:`IMPLEMENTATIONS`; every test that uses ``tracker`` (or ``open_tracker``) runs once per
implementation. Today that is ``embedded``; the remote helper adds ``remote-asgi`` and
``remote-tcp`` by defining ``IMPLEMENTATIONS`` in ``tests/remote/contract_impls.py``.

A test that needs something not every implementation can do carries
``@pytest.mark.requires(CAPABILITY, ...)`` (capabilities in :mod:`tests.contract.support`, or the
name of a wire extension such as ``"spans"``, read from the tracker's
``capabilities().extensions``); it is skipped, with the missing capability named, for
implementations that lack it.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.contract.support import DECLARED, FakeClock, OpenTracker, TrackerImpl
from tests.postgres.contract_impl import POSTGRES
from tracker_client.capabilities import Capabilities
from tracker_client.contract.table import EXTENSIONS as WIRE_EXTENSIONS
from tracker_client.factory import open_tracker as factory_open_tracker
from tracker_client.protocol import Tracker


@asynccontextmanager
async def _open_embedded(path: Path, clock: FakeClock, options: Any) -> AsyncIterator[Tracker]:
    tracker = await factory_open_tracker(f"sqlite:///{path}", clock=clock, **dict(options))
    try:
        yield tracker
    finally:
        await tracker.aclose()


EMBEDDED = TrackerImpl(name="embedded", open=_open_embedded)

#: Every implementation the suite runs against (the PostgreSQL rail: a schema of one real
#: server per test process, tests/postgres/contract_impl.py).
IMPLEMENTATIONS: list[TrackerImpl] = [EMBEDDED, POSTGRES]


def _load_extra_implementations() -> None:
    try:
        module = importlib.import_module("tests.remote.contract_impls")
    except ModuleNotFoundError as exc:
        if exc.name in ("tests.remote", "tests.remote.contract_impls"):
            return
        raise
    IMPLEMENTATIONS.extend(module.IMPLEMENTATIONS)


_load_extra_implementations()


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``requires`` marker (markers are strict)."""
    config.addinivalue_line(
        "markers",
        "requires(*capabilities): run only against trackers that have these capabilities "
        "(tests/contract/support.py lists them)",
    )


def _needed(request: pytest.FixtureRequest) -> set[str]:
    return {cap for mark in request.node.iter_markers("requires") for cap in mark.args}


def _read_from_tracker(cap: str) -> bool:
    """A capability the tracker declares itself: a flag of DECLARED, or a wire extension."""
    return cap in DECLARED or cap in WIRE_EXTENSIONS


def _lacks(caps: Capabilities, cap: str) -> bool:
    if cap in DECLARED:
        return not getattr(caps, DECLARED[cap])
    return cap in WIRE_EXTENSIONS and cap not in caps.extensions


async def _skip_unless_declared(tracker: Tracker, needed: set[str], name: str) -> None:
    """Skip when the tracker itself declares that it lacks a capability the test needs."""
    caps = await tracker.capabilities()
    missing = sorted(cap for cap in needed if _lacks(caps, cap))
    if missing:
        pytest.skip(f"tracker {name!r} declares no capability {', '.join(missing)}")


@pytest.fixture(params=[pytest.param(i, id=i.name, marks=i.marks) for i in IMPLEMENTATIONS])
def tracker_impl(request: pytest.FixtureRequest) -> TrackerImpl:
    """The implementation under test; skips when the test needs a capability it lacks."""
    impl: TrackerImpl = request.param
    # the declared ones are read from the tracker
    needed = {cap for cap in _needed(request) if not _read_from_tracker(cap)}
    missing = sorted(needed - impl.capabilities)
    if missing:
        pytest.skip(f"tracker {impl.name!r} lacks capability {', '.join(missing)}")
    return impl


@pytest.fixture
def clock() -> FakeClock:
    """The rail's time source: epoch ms, moved by the test with ``clock.advance(ms)``."""
    return FakeClock()


@pytest.fixture
async def open_tracker(
    tracker_impl: TrackerImpl, tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest
) -> AsyncIterator[OpenTracker]:
    """``await open_tracker(name="rail", **options)``: an open tracker, closed after the test.

    The same ``name`` means the same rail (database file), so two calls give two instances
    sharing one rail.
    """
    async with AsyncExitStack() as stack:

        async def open_(name: str = "rail", **options: Any) -> Tracker:
            cm = tracker_impl.open(tmp_path / f"{name}.db", clock, options)
            tracker = await stack.enter_async_context(cm)
            await _skip_unless_declared(tracker, _needed(request), tracker_impl.name)
            return tracker

        yield open_


@pytest.fixture
async def tracker(open_tracker: OpenTracker) -> Tracker:
    """An open tracker on a fresh rail with default options."""
    return await open_tracker()
