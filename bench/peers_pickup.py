"""Interactive pickup latency for :mod:`bench.peers` (``--pickup SAMPLES``): from a producer's
submit to the executor's start, with one idle worker, on every rail of this worker (embedded,
served, PostgreSQL) beside the peers in the same run.

Each round starts, per system, one worker process (concurrency as asked; the peers' ``-serve``
kinds of :mod:`bench.peer_workers`, which wait for work as their users run them: arq polling
every 0.05 s as in the drains, Celery's worker blocking on its Redis queue, huey's consumer
polling with its back-off, procrastinate and PgQueuer woken by LISTEN/NOTIFY), submits a
warm-up job and waits for it to start (so the worker is up, without sleeping for it), then
takes SAMPLES samples: a pause of 0.3-1.2 s (random, so the worker settles into idle), the
time, one submit from this process, and the time the job's executor wrote when it started
(:mod:`bench.peers_stamp`; one machine, one clock). The table
gives p50/p95/p99 and the maximum over every round's samples.

The stamps come through a named pipe (:class:`StampPipe`): this process sleeps until the
executor's line arrives instead of reading the stamp file every millisecond, which woke it ~5
times inside each measured pickup, on the same two cores as the worker and the server. A
regular stamp file (:mod:`bench.capacity` gives one) is still read by polling.

``postgres@TREE`` (``--systems postgres@/tmp/base,postgres@.``): the PostgreSQL rail of the
source tree ``TREE``, its worker and its producer both running that tree's code (the producer
in a process of its own, taking the submit time itself): a before/after in one run, rounds
interleaved with the other systems. ``served@TREE`` likewise: that tree seeds the rail file
and runs ``tracker serve``, the worker and the producer; ``embedded@TREE``: that tree seeds the
rail file and runs the worker and the producer (no server).

``--alternate`` runs every system's idle worker at once and takes the samples in turns
instead (:func:`alternating`): on a machine whose load drifts (others' tests and benches on
the same two cores) one system's round and the next can see different loads, while samples
taken in turns see the same one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path

import anyio

from bench.peer_drains import ROOT, Redis, _new_database
from bench.peers_stamp import ENV
from bench.worker import noop_config, worker_env
from tests.postgres.server import PgServer

Submit = Callable[[str], Awaitable[None]]
Producer = AbstractAsyncContextManager[Submit]
#: How long a stamp may take before the sample is given up as lost.
STAMP_TIMEOUT_S = 60.0
#: The pause before each sample (seconds, uniform).
PAUSE_S = (0.3, 1.2)


def _worker(argv: list[str], stamps: Path, tree: Path = ROOT) -> subprocess.Popen[bytes]:
    env = {**worker_env(str(tree)), ENV: str(stamps)}
    return subprocess.Popen(
        argv, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _peer(kind: str, where: str, concurrency: int, stamps: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "bench.peer_workers", f"{kind}-serve", where, str(concurrency)]
    return _worker(argv, stamps)


def _ours(
    url: str, tmp: Path, concurrency: int, stamps: Path, tree: Path = ROOT
) -> subprocess.Popen[bytes]:
    config = noop_config(
        tmp / "pickup.toml",
        url,
        concurrency=concurrency,
        drain=False,
        callable_path="bench.peers_stamp:stamp",
    )
    argv = [sys.executable, "-m", "worker", "run", "--config", str(config)]
    return _worker(argv, stamps, tree)


#: The producer of ``RAIL@TREE`` (a source tree's own code, in a process of its own): the
#: rail seeded (a PostgreSQL one; a served rail's file is seeded before its server starts),
#: then per line on stdin (a sample id) the time just before its create, once created. Only
#: the public API both trees share: open_tracker, create_task.
_TREE_PRODUCER = """
import sys, time, anyio
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

async def main(url):
    if url.startswith("postgres"):
        from bench.postgres import _seed
        await _seed(url, 0)
    tracker = await open_tracker(url)
    try:
        [pid] = [p.id for p in await tracker.list_pipelines() if p.name == "bench"]
        print("ready", flush=True)
        while sample := (await anyio.to_thread.run_sync(sys.stdin.readline)).strip():
            submitted = time.time()
            await tracker.create_task(TaskCreate(pipeline_id=pid, title=sample))
            print(f"{submitted:.6f}", flush=True)
    finally:
        await tracker.aclose()

anyio.run(main, sys.argv[1])
"""


def _spawn_producer(url: str, tree: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _TREE_PRODUCER, url],
        env=worker_env(str(tree)),
        cwd=tree,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


#: Seeds a rail file with a source tree's own code (``served@TREE``): the bench pipeline.
_TREE_SEED = """
import sys, anyio
from pathlib import Path
from bench.worker import _seed

anyio.run(_seed, Path(sys.argv[1]), 0)
"""


def _seed_file_of(tree: Path, db: Path) -> None:
    """The rail file ``db`` made and seeded by the source tree ``tree``."""
    subprocess.run(
        [sys.executable, "-c", _TREE_SEED, str(db)],
        env=worker_env(str(tree)),
        cwd=tree,
        check=True,
        timeout=120,
    )


@asynccontextmanager
async def _tree_producer(url: str, tree: Path) -> AsyncIterator[Submit]:
    """Submits from a process running ``tree``'s code (see :data:`_TREE_PRODUCER`); the
    submit time is the one that process took just before its create."""
    proc = _spawn_producer(url, tree)
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def line() -> str:
        got = await anyio.to_thread.run_sync(stdout.readline)
        if not got:
            raise RuntimeError(f"the producer of {tree} exited ({proc.wait()})")
        return str(got).strip()

    try:
        await line()  # ready: seeded and open

        async def submit(sample: str) -> None:
            stdin.write(sample + "\n")
            stdin.flush()
            _submitted[sample] = float(await line())

        yield submit
    finally:
        stdin.close()  # the producer's end of input: it exits by itself
        _reap(proc)


#: Submit times the producer of ``postgres@TREE`` reported, by sample (else: taken here).
_submitted: dict[str, float] = {}


@asynccontextmanager
async def _our_producer(url: str) -> AsyncIterator[Submit]:
    from tracker_client.factory import open_tracker
    from tracker_client.models import TaskCreate

    tracker = await open_tracker(url)
    try:
        [pid] = [p.id for p in await tracker.list_pipelines() if p.name == "bench"]

        async def submit(sample: str) -> None:
            await tracker.create_task(TaskCreate(pipeline_id=pid, title=sample))

        yield submit
    finally:
        await tracker.aclose()


@asynccontextmanager
async def _arq_producer(port: int) -> AsyncIterator[Submit]:
    from arq.connections import RedisSettings, create_pool

    pool = await create_pool(RedisSettings(host="127.0.0.1", port=port))
    try:

        async def submit(sample: str) -> None:
            await pool.enqueue_job("arq_stamp", sample)

        yield submit
    finally:
        await pool.aclose()


@asynccontextmanager
async def _celery_producer(port: int) -> AsyncIterator[Submit]:
    from bench.peer_celery import celery_app

    app = celery_app(port)

    async def submit(sample: str) -> None:
        app.send_task("stamp", args=[sample])  # Celery's publish is synchronous

    try:
        yield submit
    finally:
        app.close()


@asynccontextmanager
async def _huey_producer(filename: str) -> AsyncIterator[Submit]:
    from bench.peer_huey import huey_app, stamp

    _, task = huey_app(filename, stamp)

    async def submit(sample: str) -> None:
        task(sample)  # huey's enqueue is a synchronous insert

    yield submit


@asynccontextmanager
async def _procrastinate_producer(conninfo: str) -> AsyncIterator[Submit]:
    from bench.peer_workers import procrastinate_app

    app = procrastinate_app(conninfo)
    async with app.open_async():

        async def submit(sample: str) -> None:
            await app.tasks["stamp"].defer_async(sample=sample)

        yield submit


async def _procrastinate_schema(conninfo: str) -> None:
    from bench.peer_workers import procrastinate_app

    app = procrastinate_app(conninfo)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def _stamped(stamps: Path) -> dict[str, float]:
    try:
        text = stamps.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    found: dict[str, float] = {}
    for line in text.splitlines():
        sample, _, at = line.partition(" ")
        if at:
            found[sample] = float(at)
    return found


async def _wait_stamp(stamps: Path, sample: str, proc: subprocess.Popen[bytes]) -> float:
    deadline = time.monotonic() + STAMP_TIMEOUT_S
    while True:
        at = _stamped(stamps).get(sample)
        if at is not None:
            return at
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({proc.returncode}) before {sample} started")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{sample} did not start within {STAMP_TIMEOUT_S:.0f} s")
        await anyio.sleep(0.001)  # polling the stamp file, under the deadline above


#: How often a wait on the stamp pipe looks whether the worker is still there.
ALIVE_CHECK_S = 1.0


class StampPipe:
    """The stamp file as a named pipe this process reads: a wait sleeps until a line comes
    (see the module docstring). Made before the worker starts and held open (read and write)
    until it is gone, so a worker's ``open(path, "a")`` never blocks and never meets a closed
    pipe; each stamp line is one ``write`` under ``PIPE_BUF``, so lines never interleave."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._partial = b""
        self._seen: dict[str, float] = {}

    def _drain(self) -> None:
        """Read what the pipe holds now into :attr:`_seen` (a sample id -> its stamp)."""
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                sample, _, at = line.decode().partition(" ")
                if at:
                    self._seen[sample] = float(at)

    async def wait(self, sample: str, proc: subprocess.Popen[bytes]) -> float:
        """The stamp of ``sample``, once its executor wrote it; ``RuntimeError`` when the
        worker exited first or none came within :data:`STAMP_TIMEOUT_S`."""
        deadline = time.monotonic() + STAMP_TIMEOUT_S
        while True:
            self._drain()
            at = self._seen.pop(sample, None)
            if at is not None:
                return at
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({proc.returncode}) before {sample} started")
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{sample} did not start within {STAMP_TIMEOUT_S:.0f} s")
            with anyio.move_on_after(min(ALIVE_CHECK_S, left)):
                await anyio.wait_readable(self._fd)

    def close(self) -> None:
        """Stop reading (after the worker is gone). Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid`` and its descendants so far (its own, its reaped
    children's, and every live descendant's own: a peer's worker may fork its pool)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    own: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry)] = int(fields[1])
        own[int(entry)] = int(fields[11]) + int(fields[12])
        if int(entry) == pid:
            own[pid] += int(fields[13]) + int(fields[14])
    total, frontier = own.get(pid, 0), [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                total += own[child]
                frontier.append(child)
    return total / tick


class CpuMeter:
    """CPU seconds spent while the samples were taken (after the warm-up): the worker's
    process tree, and the PostgreSQL server's processes (every backend: the producer's, the
    worker's and the listener's) for the systems that use it. Rounds run one system at a
    time, so the server's share is that system's."""

    def __init__(self, worker: int, server: Callable[[], float] | None) -> None:
        self._worker = worker
        self._server = server
        self._start = (0.0, 0.0)
        self.worker_s = 0.0
        self.server_s: float | None = None

    def _now(self) -> tuple[float, float]:
        return tree_cpu_s(self._worker), self._server() if self._server else 0.0

    def start(self) -> None:
        """Sampling begins."""
        self._start = self._now()

    def stop(self) -> None:
        """Sampling ended: what was spent since :meth:`start`."""
        worker, server = self._now()
        self.worker_s = worker - self._start[0]
        if self._server is not None:
            self.server_s = server - self._start[1]


async def _samples(
    producer: Producer,
    stamps: Path | StampPipe,
    proc: subprocess.Popen[bytes],
    samples: int,
    meter: CpuMeter | None = None,
) -> list[float]:
    started: Callable[[str], Awaitable[float]]
    if isinstance(stamps, StampPipe):
        started = partial(stamps.wait, proc=proc)
    else:
        started = partial(_wait_stamp, stamps, proc=proc)

    out: list[float] = []
    async with producer as submit:
        await submit("warm-up")
        await started("warm-up")
        if meter is not None:
            meter.start()
        for i in range(samples):
            await anyio.sleep(random.uniform(*PAUSE_S))  # pacing: the worker goes idle
            sample = f"s{i}-{uuid.uuid4().hex[:6]}"
            submitted = time.time()
            await submit(sample)
            submitted = _submitted.pop(sample, submitted)
            out.append(await started(sample) - submitted)
        if meter is not None:
            meter.stop()
    return out


@contextmanager
def _running(
    name: str, tmp: Path, concurrency: int, redis: Redis | None, pg: PgServer | None
) -> Iterator[tuple[subprocess.Popen[bytes], Producer, StampPipe, Callable[[], float] | None]]:
    """One idle worker of ``name`` started in ``tmp``: its process, its producer (not entered
    yet), the pipe its executor stamps into and its server's CPU meter (None: none); stopped
    at the end (the worker first, then its server; each by its pid)."""
    from bench.postgres import _server_cpu_s
    from bench.worker import _seed as seed_file

    pipe = StampPipe(tmp / "stamps")
    stamps = pipe.path
    stops: list[subprocess.Popen[bytes]] = []
    producer: Producer
    server_cpu: Callable[[], float] | None = None
    try:
        if name in ("embedded", "served"):
            db = tmp / "rail.db"
            anyio.run(seed_file, db, 0)
            url = f"sqlite:///{db}"
            if name == "served":
                from bench.remote import _start_server

                server, url = _start_server(db)
                stops.append(server)
                server_cpu = partial(tree_cpu_s, server.pid)
            proc = _ours(url, tmp, concurrency, stamps)
            producer = _our_producer(url)
        elif name == "postgres":
            from bench.postgres import _seed as seed_pg

            assert pg is not None
            url = f"{pg.url}?schema=pickup_{uuid.uuid4().hex[:12]}&pool_size=4"
            anyio.run(seed_pg, url, 0)
            proc = _ours(url, tmp, concurrency, stamps)
            producer = _our_producer(url)
        elif name.startswith("served@"):  # a source tree's server, worker and producer
            from bench.remote import _start_server

            tree = Path(name.partition("@")[2]).resolve()
            db = tmp / "rail.db"
            _seed_file_of(tree, db)
            server, url = _start_server(db, tree)
            stops.append(server)
            server_cpu = partial(tree_cpu_s, server.pid)
            proc = _ours(url, tmp, concurrency, stamps, tree)
            producer = _tree_producer(url, tree)
        elif name.startswith("embedded@"):  # a source tree's rail file, worker and producer
            tree = Path(name.partition("@")[2]).resolve()
            db = tmp / "rail.db"
            _seed_file_of(tree, db)
            url = f"sqlite:///{db}"
            proc = _ours(url, tmp, concurrency, stamps, tree)
            producer = _tree_producer(url, tree)
        elif name.startswith("postgres@"):  # a source tree's rail, worker and producer
            assert pg is not None
            tree = Path(name.partition("@")[2]).resolve()
            url = f"{pg.url}?schema=pickup_{uuid.uuid4().hex[:12]}&pool_size=4"
            producer = _tree_producer(url, tree)  # seeds the rail as it starts
            proc = _ours(url, tmp, concurrency, stamps, tree)
        elif name == "arq":
            assert redis is not None
            proc = _peer("arq", str(redis.port), concurrency, stamps)
            producer = _arq_producer(redis.port)
        elif name == "celery":
            assert redis is not None
            proc = _peer("celery", str(redis.port), concurrency, stamps)
            producer = _celery_producer(redis.port)
        elif name == "huey":
            filename = str(tmp / "huey.db")
            proc = _peer("huey", filename, concurrency, stamps)
            producer = _huey_producer(filename)
        elif name == "procrastinate":
            assert pg is not None
            conninfo = _new_database(pg)
            anyio.run(_procrastinate_schema, conninfo)
            proc = _peer("procrastinate", conninfo, concurrency, stamps)
            producer = _procrastinate_producer(conninfo)
        else:
            from bench import peer_pgqueuer

            assert pg is not None
            conninfo = _new_database(pg)
            anyio.run(peer_pgqueuer.install, conninfo)
            proc = _peer("pgqueuer", conninfo, concurrency, stamps)
            producer = peer_pgqueuer.producer(conninfo)
        if pg is not None and name.partition("@")[0] not in ("embedded", "served"):
            server_cpu = partial(_server_cpu_s, pg)
        stops.insert(0, proc)
        yield proc, producer, pipe, server_cpu
    finally:
        for stop in stops:  # the worker first, then its server; each by its pid
            stop.terminate()
            _reap(stop)
        pipe.close()  # the workers are gone: nobody writes to it any more


def _system(
    name: str, samples: int, concurrency: int, redis: Redis | None, pg: PgServer | None
) -> tuple[list[float], CpuMeter]:
    """One idle worker of ``name`` and ``samples`` pickups (seconds each), and the CPU they
    cost (:class:`CpuMeter`)."""
    with (
        tempfile.TemporaryDirectory() as tmp_s,
        _running(name, Path(tmp_s), concurrency, redis, pg) as (proc, producer, pipe, server),
    ):
        meter = CpuMeter(proc.pid, server)
        return anyio.run(_samples, producer, pipe, proc, samples, meter), meter


def alternating(
    names: list[str], samples: int, concurrency: int, redis: Redis | None, pg: PgServer | None
) -> dict[str, list[float]]:
    """``samples`` pickups of each system in ``names`` (seconds each), every system's idle
    worker running at once and the systems taking turns sample by sample, in a fresh random
    order each turn: a before/after whose samples saw the same load within a second or two
    of each other (``--alternate``; the machine's load drifts over a round of minutes). No
    CPU figures: the servers and workers run side by side."""
    with contextlib.ExitStack() as stack:
        running = {}
        for name in names:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            running[name] = stack.enter_context(_running(name, tmp, concurrency, redis, pg))
        return anyio.run(_turns, running, samples)


async def _turns(
    running: dict[
        str, tuple[subprocess.Popen[bytes], Producer, StampPipe, Callable[[], float] | None]
    ],
    samples: int,
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in running}
    async with contextlib.AsyncExitStack() as stack:
        submits: dict[str, Submit] = {}
        for name, (proc, producer, pipe, _) in running.items():
            submits[name] = await stack.enter_async_context(producer)
            await submits[name]("warm-up")
            await pipe.wait("warm-up", proc)
        names = list(running)
        for i in range(samples):
            random.shuffle(names)
            for name in names:
                proc, _, pipe, _ = running[name]
                await anyio.sleep(random.uniform(*PAUSE_S))  # pacing: the workers go idle
                sample = f"s{i}-{uuid.uuid4().hex[:6]}"
                submitted = time.time()
                await submits[name](sample)
                submitted = _submitted.pop(sample, submitted)
                out[name].append(await pipe.wait(sample, proc) - submitted)
    return out


def percentile(sorted_values: list[float], p: float) -> float:
    """The nearest-rank ``p`` percentile (0-100) of ``sorted_values``."""
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(rank) - 1]


def pickup(args: argparse.Namespace, redis: Redis | None, pg: PgServer | None) -> list[str]:
    """Every system's pickup latencies, rounds interleaved; the table as Markdown lines."""
    latencies: dict[str, list[float]] = {name: [] for name in args.systems}
    #: per system: worker CPU seconds, server CPU seconds (None: not measured) over its samples
    cpu: dict[str, tuple[float, float | None]] = {}
    failed: dict[str, str] = {}
    names = list(args.systems)
    if args.alternate:
        for run in range(args.runs):
            for name, got in alternating(names, args.pickup, args.concurrency, redis, pg).items():
                latencies[name] += got
                got.sort()
                print(
                    f"  run {run + 1} {name}: p50 {percentile(got, 50) * 1000:.1f} ms, "
                    f"max {got[-1] * 1000:.1f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    for run in range(0 if args.alternate else args.runs):
        shift = run % len(names)
        for name in names[shift:] + names[:shift]:
            if name in failed:
                continue
            try:
                got, meter = _system(name, args.pickup, args.concurrency, redis, pg)
            except Exception as exc:  # a rail being built may not run: say why, go on
                failed[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                continue
            latencies[name] += got
            worker_s, server_s = cpu.get(name, (0.0, None))
            if meter.server_s is not None:
                server_s = (server_s or 0.0) + meter.server_s
            cpu[name] = (worker_s + meter.worker_s, server_s)
            got.sort()
            print(
                f"  round {run + 1} {name}: p50 {percentile(got, 50) * 1000:.1f} ms, "
                f"max {got[-1] * 1000:.1f} ms",
                file=sys.stderr,
                flush=True,
            )
    lines = [
        "| system | samples | p50 ms | p95 ms | p99 ms | max ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in names:
        values = sorted(latencies[name])
        if not values:
            continue
        ms = [percentile(values, p) * 1000 for p in (50, 95, 99)]
        lines.append(
            f"| {name} | {len(values)} | {ms[0]:.1f} | {ms[1]:.1f} | {ms[2]:.1f} | "
            f"{values[-1] * 1000:.1f} |"
        )
    if not args.alternate:  # side by side, the CPU is no one system's
        lines += cpu_lines(names, latencies, cpu)
    lines += [f"{name}: skipped: {why}" for name, why in failed.items()]
    return lines


def cpu_lines(
    names: list[str],
    latencies: dict[str, list[float]],
    cpu: dict[str, tuple[float, float | None]],
) -> list[str]:
    """The CPU each pickup cost, as Markdown lines: per sample, the worker's process tree and
    its server (PostgreSQL's processes, or ``tracker serve``; "-": not measured), from the
    warm-up's end to the last sample, idle time between samples included (a worker's idle
    back-off and probes are part of what a pickup costs a loaded machine)."""
    lines = [
        "",
        "CPU per pickup (ms; the sampling phase, idle time between samples included):",
        "",
        "| system | worker CPU ms | server CPU ms |",
        "| --- | --- | --- |",
    ]
    for name in names:
        count = len(latencies[name])
        if not count or name not in cpu:
            continue
        worker_s, server_s = cpu[name]
        server = "-" if server_s is None else f"{server_s / count * 1000:.2f}"
        lines.append(f"| {name} | {worker_s / count * 1000:.2f} | {server} |")
    return lines


def _reap(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """Wait up to 30 s for ``proc`` to exit, then kill it by its pid and reap it."""
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)
