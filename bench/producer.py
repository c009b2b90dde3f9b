"""Producer API throughput: ``Rail.submit`` and ``submit_many`` on an embedded rail file and on
a served rail (``backlog-worker tracker serve`` on 127.0.0.1), async and through the sync twin.

    python -m bench.producer [--tasks 2000] [--concurrency 8] [--batch 100]

Phases per rail: ``submit`` one at a time (latency-bound), ``--concurrency`` submitters at once
(asyncio tasks; for the sync twin, threads sharing its one loop thread), and ``submit_many`` in
batches of ``--batch``. Prints tasks/s and p50/p99 per call (ms). A benchmark, not a test: it
checks only that the rail holds every task submitted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import anyio

from bench.remote import _pipeline, _start_server
from tracker_client import Rail, connect, connect_sync
from tracker_client.factory import open_tracker


def _line(what: str, n: int, seconds: float, calls: list[float]) -> None:
    calls = sorted(calls)
    p50 = statistics.median(calls) * 1000
    p99 = calls[min(len(calls) - 1, int(len(calls) * 0.99))] * 1000
    print(f"  {what:<34} {n / seconds:9.0f} tasks/s   p50 {p50:7.2f} ms   p99 {p99:7.2f} ms")


async def _timed(call: Callable[[], Awaitable[object]], calls: list[float]) -> None:
    t0 = time.perf_counter()
    await call()
    calls.append(time.perf_counter() - t0)


async def _async_phases(url: str, n: int, concurrency: int, batch: int) -> None:
    async with connect(url) as rail:
        await rail.submit("bench", "warm-up")
        calls: list[float] = []
        t0 = time.perf_counter()
        for i in range(n):
            await _timed(partial(rail.submit, "bench", f"seq {i}"), calls)
        _line("async submit, sequential", n, time.perf_counter() - t0, calls)

        calls = []
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for k in range(concurrency):
                tg.start_soon(_submitter, rail, range(k, n, concurrency), calls)
        _line(f"async submit, {concurrency} concurrent", n, time.perf_counter() - t0, calls)

        calls = []
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            items = [
                {"pipeline": "bench", "title": f"bulk {i}"} for i in range(start, start + batch)
            ]
            await _timed(partial(rail.submit_many, items), calls)
        _line(f"async submit_many, batches of {batch}", n, time.perf_counter() - t0, calls)


async def _submitter(rail: Rail, numbers: range, calls: list[float]) -> None:
    for i in numbers:
        await _timed(partial(rail.submit, "bench", f"par {i}"), calls)


def _sync_phases(url: str, n: int, concurrency: int) -> None:
    with connect_sync(url) as rail:
        rail.submit("bench", "warm-up")
        calls: list[float] = []

        def one(i: int) -> None:
            t0 = time.perf_counter()
            rail.submit("bench", f"sync {i}")
            calls.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        for i in range(n):
            one(i)
        _line("sync submit, sequential", n, time.perf_counter() - t0, calls)
        calls = []
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(n)))
        _line(f"sync submit, {concurrency} threads", n, time.perf_counter() - t0, calls)


async def _create(url: str) -> None:
    tracker = await open_tracker(url)
    try:
        await tracker.create_pipeline("bench", _pipeline("bench"))
    finally:
        await tracker.aclose()


async def _count(url: str) -> int:
    tracker = await open_tracker(url)
    try:
        return int(await tracker.call("count_tasks"))
    finally:
        await tracker.aclose()


def _rail(name: str, url: str, args: argparse.Namespace) -> None:
    print(f"{name} ({url.split('?')[0]}), {args.tasks} tasks per phase")
    anyio.run(_async_phases, url, args.tasks, args.concurrency, args.batch)
    _sync_phases(url, args.tasks, args.concurrency)
    expected = 5 * args.tasks + 2
    got = anyio.run(_count, url)
    if got != expected:
        raise SystemExit(f"{name}: the rail holds {got} tasks, {expected} were submitted")


def main() -> None:
    """Run every phase on a fresh embedded rail file, then on a fresh served rail."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'embedded.db'}"
        anyio.run(_create, url)
        _rail("embedded", url, args)
        server, served = _start_server(Path(tmp) / "served.db")
        try:
            anyio.run(_create, served)
            _rail("served", served, args)
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
