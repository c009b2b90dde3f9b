"""Peak RSS of an idle-to-busy worker (no-op ``python`` executor), beside its peers', and
where it goes.

    python -m bench.memory [--tasks 2000] [--concurrency 10] [--root DIR ...] [--top 15]
                           [--rail embedded,served,postgres] [--peers huey,pgqueuer]
                           [--runs 1] [--python PATH | --shared-venv] [--no-profile]
                           [--tracemalloc] [--event-loop auto|asyncio|uvloop]
                           [--startup N]

Every system runs in a venv of its own (:mod:`bench.peers_venvs`, under ``.bench-venvs/``):
huey and PgQueuer with only their own requirements (huey imports redis-py where it is
installed: 43.5 MiB instead of 24), this worker with only its declared runtime requirements
(``[project].dependencies`` of each ``--root``, plus the ``postgres`` extra for that rail).
Each venv's package count and contents are printed with the figures. ``--shared-venv`` runs
every system on this interpreter instead; ``--python`` names our worker's.

Each ``--root`` is a source tree to measure (default: this one; add an older tree, e.g. a
``git worktree add /tmp/before HEAD~3``, to compare before/after in the same run); each
root's bytecode cache is written first (``compileall``), so a fresh tree's first round does
not pay for compiling it.
``--rail``: the worker on a SQLite file itself (``embedded``), through a ``tracker serve``
process of this tree on that file (``served``; the server's memory is not counted), or on a
PostgreSQL server started for the run at stock durability (``postgres``,
:class:`bench.peers_setup.StockPgServer`, shared with PgQueuer). ``--peers``: huey (beside the
SQLite rails) and PgQueuer (beside the PostgreSQL one), each one consumer draining N no-op
jobs (:mod:`bench.peer_drains`). ``--runs`` rounds, every system once per round, the order
rotating; the table prints each system's median peak and its median per-round ratio to its
peer. Per root and rail, real ``worker run`` processes on a fresh rail, each started idle on
an empty queue (registered in the rail's worker list; a maintenance pass every
:data:`MAINTENANCE_S` s, so what the passes a worker runs every 5 s by default import is in its
peak), then given N no-op tasks, stopped by SIGTERM once all are done:

1. clean (every round): its own peak RSS (``VmHWM``, sampled by :mod:`bench.rss`; ``wait4``'s
   figure counts the forked copy of this process);
2. profiled (once): the same with an import hook that reads the RSS around each module's
   execution, so each module's own cost (its RSS growth less its imports') is printed, top
   ``--top`` modules and per top-level package (``--no-profile`` skips it; ``--tracemalloc``
   reads Python's own allocations instead of the RSS, exact to the byte where RSS moves by
   pages, and prints what is still allocated at the end by the file that allocated it). The
   hook's own cost is small but not zero: the clean run's figure is the one to quote. Its
   anonymous and file-backed RSS (``/proc/<pid>/smaps_rollup``, read once all tasks are done)
   are printed too, each against a fresh interpreter that imported the same modules (what
   running added: the rail's connections and caches, the runs' objects, the library code the
   run executes), with the most threads it had while busy; and its peak by part
   (:data:`PARTS`): the modules it imported, loaded part
   by part into a fresh interpreter (the interpreter, OpenSSL, asyncio and anyio, ... this
   project), the rest of its peak being what it allocated while running; with each part's CPU
   ms to import (the median of a few such interpreters), start-up's cost by library. And its
   RSS by stage (what each added, and how much of it imports brought): start-up to the
   configuration read, the event loop's start, the rail's opening, then idle and busy (peaks).

The floor is printed per rail: a fresh interpreter of the same venv loading only what any
worker of ours needs whatever its own code does (:data:`_FLOOR_CHILD`).

``--startup N``: a worker's start-up cost, in the same rounds: N ``worker run`` processes per
round of each root and rail, each started on an empty rail in drain mode (so it opens the rail,
registers, finds nothing and exits), after one unmeasured run that writes the bytecode cache.
Their CPU (user + system, ``wait4``) and wall time are printed as medians over every round's
runs, with one ``python -X importtime`` run's sum of its modules' own import times (inflated by
that option's own overhead: read it as a ratio between roots).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The PostgreSQL rail's connections per worker (as :mod:`bench.peers` runs it).
PG_POOL_SIZE = 4
#: Our rails and the peers measured beside them, with each rail's peer of the same storage.
RAILS = ("embedded", "served", "postgres")
PEERS = ("huey", "pgqueuer")
PEER_OF = {"embedded": "huey", "served": "huey", "postgres": "pgqueuer"}
#: The measured worker's ``[worker] maintenance_interval_s``: a few passes in its idle second,
#: before it is given work. A worker runs one every 5 s by default and keeps what the first pass
#: imports; a drain of a few seconds would otherwise end before it and read a peak that no
#: worker running longer has.
MAINTENANCE_S = 0.2
#: The measured worker: ``worker run --config CONFIG`` from ROOT, run as ``python -c`` so that it
#: imports only what the worker does (not this module's argparse, sqlite3, subprocess...), with a
#: no-op callable of its own (``bench.worker:noop`` would import that module's benchmark tools).
#: With a COSTS path, an import hook reads the RSS around each module's execution and writes each
#: module's own cost (its RSS growth less its nested imports') there at exit.
_CHILD = """
import sys
root, config, costs_out, order_out, trace = sys.argv[1:6]
sys.path.insert(0, root)
if trace:  # Python's own allocations, by module, instead of the RSS
    import tracemalloc
    tracemalloc.start(1)
noop = type(sys)("bench_memory_noop")
async def run(ctx):
    from plugins.api import Transition
    return Transition()
noop.run = run
sys.modules[noop.__name__] = noop
if costs_out:
    import importlib.abc, json, os
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    def rss_kib():
        if trace:
            return tracemalloc.get_traced_memory()[0] // 1024
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page_kib
    costs, stack = {}, []
    class CostFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None and spec.loader is not None:
                    wrap(spec)
                    return spec
            return None
    def wrap(spec):
        # on the loader instance, so what else it offers (resource readers) stays
        loader = spec.loader
        inner = getattr(loader, "exec_module", None)
        if inner is None or isinstance(loader, type):
            return
        def exec_module(module):
            before = rss_kib()
            stack.append(0)
            try:
                inner(module)
            finally:
                nested = stack.pop()
                total = rss_kib() - before
                costs[spec.name] = total - nested
                if stack:
                    stack[-1] += total
                else:
                    imported[0] += total
        loader.exec_module = exec_module
    sys.meta_path.insert(0, CostFinder())
    # the stages of a run (RSS then, and how much of it imports brought): the wrapped functions
    # of the run command, each marking its stage when it is called or returns
    imported, stages = [0], [["start", rss_kib(), 0]]
    import worker.cli.run as run_command
    def mark(label):
        stages.append([label, rss_kib(), imported[0]])
    def stage(name, label, after):
        inner = getattr(run_command, name, None)
        if inner is None:
            return
        if after:
            def wrapped(*args, **kwargs):
                result = inner(*args, **kwargs)
                mark(label)
                return result
        else:
            def wrapped(*args, **kwargs):
                mark(label)
                return inner(*args, **kwargs)
        setattr(run_command, name, wrapped)
    stage("uvloop_wanted", "configuration read", after=True)
    stage("build_roles", "event loop started", after=False)
    inner_open = run_command.open_for_worker
    async def open_for_worker(*args, **kwargs):
        tracker = await inner_open(*args, **kwargs)
        mark("rail opened")
        return tracker
    run_command.open_for_worker = open_for_worker
    costs["(stages)"] = stages
sys.argv = ["backlog-worker", "run", "--config", config]
from worker.cli import main
try:
    main()
finally:
    import json
    if costs_out:
        if trace:  # what is still allocated at the end, by the file that allocated it
            stats = tracemalloc.take_snapshot().statistics("filename")
            live = [[st.traceback[0].filename, st.size // 1024] for st in stats[:40]]
            costs["(live by file)"] = live
        with open(costs_out, "w") as f:
            json.dump(costs, f)
    if order_out:  # what the worker imported, in order (None: a module it marked absent)
        with open(order_out, "w") as f:
            json.dump([[name, module is None] for name, module in sys.modules.items()], f)
"""

#: The parts of a worker's memory, in the order they are imported by :data:`_PARTS_CHILD`:
#: (label, top-level names). Each part is charged what its modules add to what came before, so
#: shared dependencies go to the first part that needs them.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("OpenSSL (_hashlib, ssl)", ("_hashlib", "hashlib", "hmac", "_ssl", "ssl")),
    ("asyncio, anyio", ("asyncio", "anyio", "sniffio")),
    ("uvloop", ("uvloop",)),
    ("sqlite3, click", ("sqlite3", "click")),
    ("pydantic, pydantic-core", ("pydantic_core", "pydantic", "annotated_types")),
    ("pydantic-settings", ("pydantic_settings", "dotenv")),
    ("httpx, httpcore, h11", ("httpx", "httpcore", "h11", "idna", "certifi")),
    ("psycopg, psycopg-pool", ("psycopg", "psycopg_binary", "psycopg_pool")),
    ("other libraries, stdlib", ()),
    ("this project", ("worker", "tracker_client", "plugins")),
)

#: How many fresh interpreters :func:`_parts` times (CPU is noisy on a shared machine).
PART_RUNS = 5

#: Imports a worker's modules (the order file of a clean run) part by part into a fresh
#: interpreter and prints each part's RSS growth and CPU ms as JSON (the interpreter's own: its
#: RSS and CPU before the first import), then its anonymous and file-backed RSS (KiB) once all
#: are imported; names the worker marked absent stay so.
_PARTS_CHILD = """
import time
cpu_at_start = time.process_time()  # the interpreter's own start-up, before any import here
import importlib, json, sys
root, order_file, parts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, root)
def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4
order = json.load(open(order_file))
for name, absent in order:
    if absent:
        sys.modules[name] = None
names = [n for n, absent in order if not absent and n not in ("__main__", "bench_memory_noop")]
out = [["interpreter", rss_kib(), cpu_at_start * 1000]]
project = tuple(parts[-1][1])
for label, tops in parts:
    before, began = rss_kib(), time.process_time()
    for name in names:
        top = name.split(".")[0]
        if tops and top not in tops or not tops and top in project:
            continue
        try:
            importlib.import_module(name)
        except Exception:
            pass
        if top == "pydantic" and "_pm" not in globals():
            import pydantic
            class _pm(pydantic.BaseModel):  # the model machinery, as the first model builds it
                x: int = 0
    out.append([label, rss_kib() - before, (time.process_time() - began) * 1000])
print(json.dumps(out))
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps([int(status[key].split()[0]) for key in ("RssAnon", "RssFile")]))
"""


class _Rail:
    """Where a measured worker of ours keeps its queue: its tracker URL and the two figures
    the bench watches (is worker ``pid`` registered; how many runs completed), read from the
    rail's own tables."""

    def __init__(self, url: str, schema: str | None = None) -> None:
        self.url = url
        self.schema = schema  # PostgreSQL: the rail's schema; None: a SQLite file (url)

    def _one(self, sql: str, *params: Any) -> Any:
        if self.schema is None:
            with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as conn:
                return conn.execute(sql.format(s=""), params).fetchone()
        import psycopg

        with psycopg.connect(self.url.split("?", 1)[0]) as conn:
            return conn.execute(
                sql.format(s=f"{self.schema}.").replace("?", "%s"), params
            ).fetchone()

    def registered(self, pid: int) -> bool:
        """Whether worker ``pid`` is in the rail's worker list (config read, tracker answered)."""
        return self._one("SELECT 1 FROM {s}workers WHERE pid = ?", pid) is not None

    def completed(self) -> int:
        """How many runs completed."""
        return int(self._one("SELECT count(*) FROM {s}runs WHERE status = 'completed'")[0])


def _run(
    root: Path,
    rail: str,
    python: str,
    event_loop: str | None,
    tasks: int,
    concurrency: int,
    profiled: bool,
    pg: Any = None,
    parts: bool = True,
    trace: bool = False,
) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import anyio

    from bench.rss import reap, vm_hwm_kib
    from bench.worker import _config, _seed

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        if rail == "postgres":
            from bench.postgres import _seed as _pg_seed

            schema = f"bench_{uuid.uuid4().hex[:12]}"
            where = _Rail(f"{pg.url}?schema={schema}&pool_size={PG_POOL_SIZE}", schema)
            anyio.run(_pg_seed, where.url, 0)
        else:
            where = _Rail(f"sqlite:///{db}")
            anyio.run(_seed, db, 0)
        server = _serve(db) if rail == "served" else None
        try:
            config = _config(tmp, db, concurrency, drain=False)
            text = config.read_text().replace("bench.worker:noop", "bench_memory_noop:run")
            if server is not None:
                text = text.replace(f"sqlite:///{db}", server[1])
            elif rail == "postgres":
                text = text.replace(f"sqlite:///{db}", where.url)
            if event_loop is not None:
                text = text.replace("[worker]\n", f'[worker]\nevent_loop = "{event_loop}"\n', 1)
            text = text.replace(
                "[worker]\n", f"[worker]\nmaintenance_interval_s = {MAINTENANCE_S}\n", 1
            )
            config.write_text(text)
            costs = tmp / "costs.json" if profiled else None
            order = tmp / "order.json"
            argv = [python, "-c", _CHILD, str(root), str(config), str(costs or ""), str(order)]
            argv.append("trace" if profiled and trace else "")
            env = _env(root)
            proc = subprocess.Popen(
                argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            smaps: dict[str, int] = {}
            try:
                _wait_for(lambda: where.registered(proc.pid), 30, "the worker to register", proc)
                time.sleep(1.0)  # idle on an empty queue first (a benchmark, not a test)
                idle = (vm_hwm_kib(proc.pid) or 0) / 1024
                _add(where.url, tasks)
                threads = [_threads(proc.pid)]

                def drained() -> bool:
                    threads[0] = max(threads[0], _threads(proc.pid))
                    return bool(where.completed() >= tasks)

                _wait_for(drained, 300, f"{tasks} completed runs", proc)
                smaps = {**_smaps(proc.pid), "threads": threads[0]}
            finally:
                proc.send_signal(signal.SIGTERM)
            ((peak, cpu),) = reap([proc])
        finally:
            if server is not None:
                server[0].terminate()
                server[0].wait(30)
            if where.schema is not None:
                import psycopg

                with psycopg.connect(pg.url, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA {where.schema} CASCADE")
        if proc.returncode != 0:
            stderr = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise SystemExit(f"worker exited {proc.returncode}: {stderr}")
        out: dict[str, Any] = {"idle_mib": idle, "peak_mib": peak, "cpu_s": cpu, **smaps}
        if costs is not None:
            out["costs"] = json.loads(costs.read_text())
        elif parts:
            out["parts"], out["imported_split_kib"] = _parts(python, root, order)
        return out


def _startups(
    root: Path, rail: str, python: str, event_loop: str | None, n: int, pg: Any, warm: bool
) -> tuple[list[tuple[float, float]], tuple[int, float] | None]:
    """``n`` start-ups of a ``worker run`` of ``root`` on an empty ``rail`` (drain mode: it
    exits once it finds no work): (CPU ms, wall ms) each, and with ``warm`` (the first round),
    after an unmeasured run, one ``-X importtime`` run's (modules, sum of own import ms)."""
    sys.path.insert(0, str(ROOT))
    import anyio

    from bench.worker import _config, _seed

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        schema = None
        url = f"sqlite:///{db}"
        if rail == "postgres":
            from bench.postgres import _seed as _pg_seed

            schema = f"bench_{uuid.uuid4().hex[:12]}"
            url = f"{pg.url}?schema={schema}&pool_size={PG_POOL_SIZE}"
            anyio.run(_pg_seed, url, 0)
        else:
            anyio.run(_seed, db, 0)
        server = _serve(db) if rail == "served" else None
        try:
            config = _config(tmp, db, 10, drain=True)
            text = config.read_text().replace("bench.worker:noop", "bench_memory_noop:run")
            text = text.replace(f"sqlite:///{db}", server[1] if server is not None else url)
            if event_loop is not None:
                text = text.replace("[worker]\n", f'[worker]\nevent_loop = "{event_loop}"\n', 1)
            config.write_text(text)
            argv = [python, "-c", _CHILD, str(root), str(config), "", "", ""]
            times = [_started(argv, root) for _ in range(n + (1 if warm else 0))]
            imports = _importtime([python, "-X", "importtime", *argv[1:]], root) if warm else None
            return times[1:] if warm else times, imports
        finally:
            if server is not None:
                server[0].terminate()
                server[0].wait(30)
            if schema is not None:
                import psycopg

                with psycopg.connect(pg.url, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _started(argv: list[str], root: Path) -> tuple[float, float]:
    """Run one start-up to its exit: (CPU ms user + system, wall ms)."""
    began = time.monotonic()
    proc = subprocess.Popen(argv, env=_env(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.monotonic() - began) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"worker exited {proc.returncode} at start-up: {stderr}")
    return (usage.ru_utime + usage.ru_stime) * 1000, wall


def _importtime(argv: list[str], root: Path) -> tuple[int, float]:
    """(modules, sum of their own import ms) of one ``python -X importtime`` start-up."""
    done = subprocess.run(
        argv, env=_env(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    own = [
        int(m.group(1))
        for m in re.finditer(r"^import time:\s+(\d+) \|", done.stderr.decode(), re.M)
    ]
    if done.returncode != 0 or not own:
        raise SystemExit(f"worker -X importtime exited {done.returncode}: {done.stderr[-2000:]!r}")
    return len(own), sum(own) / 1000


#: The floor: what any worker of ours loads whatever this project's own code does (the
#: interpreter, asyncio with OpenSSL, anyio, uvloop, click, pydantic with one model built and
#: used, pydantic-settings with one settings class loaded: the configuration's loader, a
#: declared dependency kept in use), plus its rail's driver (sqlite3; psycopg and its pool);
#: VmHWM printed in KiB.
_FLOOR_CHILD = """
import sys
import asyncio, anyio, anyio._backends._asyncio, click, pydantic, pydantic_settings
try:
    import uvloop
except ImportError:
    pass
if sys.argv[1] == "postgres":
    import psycopg, psycopg_pool
else:
    import sqlite3
class Floor(pydantic.BaseModel):
    x: int = 0
Floor.model_validate({"x": 1})
class FloorSettings(pydantic_settings.BaseSettings):
    y: int = 0
FloorSettings(y=1)
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(int(line.split()[1]))
"""


def _floor(python: str, rail: str) -> float:
    """The floor (:data:`_FLOOR_CHILD`) of a worker on ``rail`` under ``python``, MiB."""
    argv = [python, "-c", _FLOOR_CHILD, rail]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout.split()[-1]) / 1024


def _env(root: Path) -> dict[str, str]:
    """A measured worker's environment: ``root`` on the path, bytecode caching allowed (a
    worker compiling its modules from source at start-up peaks higher than an installed one,
    which never does: :func:`bench.worker.worker_env`)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _warm(python: str, root: Path) -> None:
    """Write ``root``'s bytecode cache with ``python`` before any measured run, as an installed
    worker finds it: the first run of a fresh tree would otherwise compile its modules from
    source, peaking ~2 MiB higher than every later run."""
    packages = [str(root / p) for p in ("worker", "tracker_client", "plugins")]
    subprocess.run(
        [python, "-m", "compileall", "-q", *packages],
        env=_env(root),
        stdout=subprocess.DEVNULL,
        check=True,
    )


def _parts(
    python: str, root: Path, order: Path
) -> tuple[list[tuple[str, float, float]], tuple[int, int]]:
    """(part, MiB, CPU ms) of :data:`PARTS` for the worker whose imports ``order`` lists: each
    part's import into a fresh interpreter (median CPU of :data:`PART_RUNS` such interpreters;
    the RSS does not move between them); and that interpreter's anonymous and file-backed RSS
    (KiB) once it has imported them all."""
    argv = [python, "-c", _PARTS_CHILD, str(root), str(order), json.dumps(PARTS)]
    env = _env(root)
    runs, split = [], (0, 0)
    for _ in range(PART_RUNS):
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=120, check=True
        )
        lines = done.stdout.splitlines()
        runs.append(json.loads(lines[-2]))
        anon, file_backed = json.loads(lines[-1])
        split = (anon, file_backed)
    parts = [
        (label, kib / 1024, statistics.median(run[i][2] for run in runs))
        for i, (label, kib, _) in enumerate(runs[0])
    ]
    return parts, split


def _serve(db: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``tracker serve`` of this tree on ``db`` (port 0, 127.0.0.1): the process and its URL."""
    log = db.with_suffix(".log")
    argv = [sys.executable, "-m", "worker", "tracker", "serve", "--tracker", f"sqlite://{db}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*argv, "--port", "0"], stdout=subprocess.DEVNULL, stderr=stderr, env=env
        )
    found: list[str] = []

    def listening() -> bool:
        found[:] = re.findall(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        return bool(found)

    try:
        _wait_for(listening, 30, "tracker serve to listen", proc)
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    return proc, found[0]


def _smaps(pid: int) -> dict[str, int]:
    """``Rss``, ``Anonymous`` and the file-backed rest (KiB) from ``/proc/<pid>/smaps_rollup``."""
    fields: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            name, _, value = line.partition(":")
            fields[name] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return {"rss_kib": fields.get("Rss", 0), "anon_kib": fields.get("Anonymous", 0)}


def _threads(pid: int) -> int:
    """The threads of ``pid`` now (``/proc/<pid>/status``); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def _wait_for(check: Any, timeout_s: float, what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            stderr = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise SystemExit(f"worker exited {proc.returncode} before {what}: {stderr}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling a real condition under a deadline


def _add(url: str, n: int) -> None:
    import anyio

    from bench.worker import PIPELINE
    from tracker_client.factory import open_tracker
    from tracker_client.models import TaskCreate

    async def add() -> None:
        tracker = await open_tracker(url)
        try:
            pid = await tracker.create_pipeline("busy", PIPELINE)
            for start in range(0, n, 500):
                batch = range(start, min(n, start + 500))
                await tracker.create_tasks(
                    [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in batch]
                )
        finally:
            await tracker.aclose()

    anyio.run(add)


def _report(label: str, clean: dict[str, Any], profiled: dict[str, Any] | None, top: int) -> None:
    rss, anon = clean.get("rss_kib", 0) / 1024, clean.get("anon_kib", 0) / 1024
    print(
        f"{label}: peak RSS idle {clean['idle_mib']:.1f} MiB, busy {clean['peak_mib']:.1f} MiB "
        f"(at the end: {rss:.1f} MiB, {anon:.1f} anonymous, {rss - anon:.1f} file-backed)"
        + (f" (profiled run {profiled['peak_mib']:.1f})" if profiled else "")
    )
    parts = clean.get("parts", [])
    imported = sum(mib for _, mib, _ in parts)
    print(
        "  by part (imported in this order into a fresh interpreter; MiB / CPU ms): "
        + ", ".join(f"{label} {mib:.1f} / {ms:.0f}" for label, mib, ms in parts)
        + f"; running (threads, caches, data) {clean['peak_mib'] - imported:.1f} MiB"
    )
    split = clean.get("imported_split_kib")
    if split and anon:
        print(
            "  running, at the end against that interpreter with everything imported: "
            f"anonymous +{anon - split[0] / 1024:.1f} MiB (the rail's connections and caches, "
            "the runs' objects, validators built on first use, threads' stacks and arenas), "
            f"file-backed +{rss - anon - split[1] / 1024:.1f} MiB (library code the run "
            f"executes); threads at most {clean.get('threads', 0)}"
        )
    if profiled is None:
        return
    costs: dict[str, Any] = profiled["costs"]
    live = costs.pop("(live by file)", None)
    _report_stages(costs.pop("(stages)", []), profiled, live is not None)
    if live is not None:
        print("  (profiled with tracemalloc: KiB of Python allocations, not RSS)")
        print(
            "  live at the end, by allocating file (KiB): "
            + ", ".join(f"{_short(name)} {kib}" for name, kib in live[:top])
        )
    what = "of Python allocations" if live is not None else "of RSS growth"
    print(f"  imports: {len(costs)} modules, {sum(costs.values()) / 1024:.1f} MiB {what}")
    packages: dict[str, int] = {}
    for name, kib in costs.items():
        packages[name.split(".")[0]] = packages.get(name.split(".")[0], 0) + kib
    print(
        "  top packages (MiB): "
        + ", ".join(
            f"{name} {kib / 1024:.1f}"
            for name, kib in sorted(packages.items(), key=lambda x: -x[1])[:top]
        )
    )
    print(
        "  top modules (own MiB): "
        + ", ".join(
            f"{name} {kib / 1024:.1f}"
            for name, kib in sorted(costs.items(), key=lambda x: -x[1])[:top]
        )
    )


def _report_stages(stages: list[list[Any]], profiled: dict[str, Any], traced: bool) -> None:
    """Print what each stage of the profiled run added to its RSS (and how much of that its
    imports brought): start-up up to the configuration read, the event loop's start, the rail's
    opening, then idle on an empty queue and busy (peaks, read by the bench)."""
    if not stages or traced:
        return
    cells = []
    (_, prev_rss, prev_imp), *rest = stages
    cells.append(f"interpreter and the import hook {prev_rss / 1024:.1f}")
    for label, rss, imp in rest:
        cells.append(f"{label} +{(rss - prev_rss) / 1024:.1f} ({(imp - prev_imp) / 1024:.1f})")
        prev_rss, prev_imp = rss, imp
    idle, peak = profiled["idle_mib"], profiled["peak_mib"]
    cells.append(f"registered, idle +{idle - prev_rss / 1024:.1f}")
    cells.append(f"busy +{peak - idle:.1f}")
    print("  by stage (MiB, of which imports; idle and busy are peaks): " + ", ".join(cells))


def _peer_peak(peer: str, tasks: int, concurrency: int, pg: Any) -> float:
    """A peer's worker (one process) drains ``tasks`` no-op jobs: its own peak RSS, MiB."""
    sys.path.insert(0, str(ROOT))
    from bench.peer_drains import huey_drain, pgqueuer_drain

    if peer == "huey":
        result = huey_drain(tasks, 1, concurrency)
    else:
        result = pgqueuer_drain(pg, tasks, 1, concurrency)
    if result["done"] != tasks:
        raise SystemExit(f"{peer} drained {result['done']} of {tasks} ({result['exit_codes']})")
    return float(result["peak_rss_mib"])


def _venv(name: str) -> str:
    """The venv (:mod:`bench.peers_venvs`) a system runs in: a peer's own, or ours."""
    if name in PEERS:
        return name
    return "ours-postgres" if name == "postgres" else "ours"


def _pythons(
    args: argparse.Namespace, systems: list[tuple[str, Path | None]]
) -> dict[tuple[str, Path | None], str]:
    """The interpreter of each (system, root): a venv of its own (:mod:`bench.peers_venvs`,
    ours from that root's declared requirements), unless ``--shared-venv`` (this interpreter
    for all) or ``--python`` (ours) says otherwise."""
    from bench import peers_venvs

    out: dict[tuple[str, Path | None], str] = {}
    for name, root in systems:
        if root is not None and args.python:
            out[(name, root)] = args.python
        elif args.shared_venv:
            out[(name, root)] = sys.executable
        else:
            pyproject = (root or ROOT) / "pyproject.toml"
            out[(name, root)] = python = peers_venvs.python_for(_venv(name), pyproject)
            print(f"{name} ({root or 'peer'}): {peers_venvs.summary(_venv(name), python)}")
    return out


def _ratio(rows: list[float], base: list[float]) -> str:
    """The median over rounds of ``rows`` over ``base`` in the same round."""
    ratios = [r / b for r, b in zip(rows, base, strict=False) if b]
    return f"{statistics.median(ratios):.2f}" if ratios else "-"


def _short(filename: str) -> str:
    """A file name from its package down (``.../site-packages/pydantic/main.py``: the last
    three parts)."""
    return "/".join(Path(filename).parts[-3:])


def main() -> None:
    """Measure each root (and the chosen peers) and print peak RSS and top import costs."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--root", action="append", type=Path, default=[])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--rail", default="embedded", help="embedded, served, postgres (a,b)")
    parser.add_argument("--peers", default="", help="huey and/or pgqueuer, in the same rounds")
    parser.add_argument("--runs", type=int, default=1, help="interleaved rounds")
    parser.add_argument("--python", default="", help="our worker's interpreter")
    parser.add_argument(
        "--shared-venv",
        action="store_true",
        help="run every system on this interpreter, not each in a venv of its own",
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the import profile")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="profile Python's allocations per module (tracemalloc) instead of the RSS",
    )
    parser.add_argument(
        "--event-loop",
        choices=["auto", "asyncio", "uvloop"],
        help="[worker] event_loop for every root (default: unset; older roots lack the key)",
    )
    parser.add_argument(
        "--startup",
        type=int,
        default=0,
        help="also time N start-ups per round of each root and rail (an empty rail, drain mode)",
    )
    args = parser.parse_args()
    roots = [r.resolve() for r in args.root] or [ROOT]
    for root in roots:
        if not (root / "worker" / "cli").is_dir():
            parser.error(f"--root {root}: not a source tree of this project (no worker/cli)")
    rails = [r.strip() for r in args.rail.split(",") if r.strip()]
    for rail in rails:
        if rail not in RAILS:
            parser.error(f"--rail {rail!r}: not a rail ({', '.join(RAILS)})")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    for peer in peers:
        if peer not in PEERS:
            parser.error(f"--peers {peer!r}: not a measured peer ({', '.join(PEERS)})")
    if args.python and not os.access(args.python, os.X_OK):
        parser.error(f"--python {args.python}: not an executable interpreter")
    if args.runs < 1 or args.tasks < 1:
        parser.error("--runs and --tasks must be at least 1")
    if args.startup < 0:
        parser.error("--startup must be 0 or more")
    sys.path.insert(0, str(ROOT))
    from bench import peer_drains, peers_setup

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {peers_setup.machine()}")
    print(f"load average before: {peers_setup.load()}", flush=True)
    systems = [(p, None) for p in peers] + [(rail, root) for rail in rails for root in roots]
    pythons = _pythons(args, systems)
    for name, root in systems:
        if root is not None:
            _warm(pythons[(name, root)], root)
    peer_drains.PYTHONS.update({p: pythons[(p, None)] for p in peers})
    pg = None
    if "postgres" in rails or "pgqueuer" in peers:
        from tests.postgres.server import find_bindir

        bindir = find_bindir()
        if bindir is None:
            parser.error("PostgreSQL is not installed: apt-get install postgresql")
        pg = peers_setup.StockPgServer.create(bindir)
    peaks: dict[tuple[str, Path | None], list[float]] = {s: [] for s in systems}
    clean: dict[tuple[str, Path | None], dict[str, Any]] = {}
    starts: dict[tuple[str, Path | None], list[tuple[float, float]]] = {}
    imports: dict[tuple[str, Path | None], tuple[int, float]] = {}
    try:
        if pg is not None:
            pg.start()
        for run in range(args.runs):
            shift = run % len(systems)
            for name, root in systems[shift:] + systems[:shift]:
                if root is None:
                    peak = _peer_peak(name, args.tasks, args.concurrency, pg)
                else:
                    out = _run(
                        root,
                        name,
                        pythons[(name, root)],
                        args.event_loop,
                        args.tasks,
                        args.concurrency,
                        profiled=False,
                        pg=pg,
                        parts=run == 0,
                    )
                    clean.setdefault((name, root), out)
                    peak = out["peak_mib"]
                    if args.startup:
                        times, found = _startups(
                            root,
                            name,
                            pythons[(name, root)],
                            args.event_loop,
                            args.startup,
                            pg,
                            warm=run == 0,
                        )
                        starts.setdefault((name, root), []).extend(times)
                        if found is not None:
                            imports[(name, root)] = found
                peaks[(name, root)].append(peak)
                label = name if root is None else f"{name} {root}"
                print(f"  round {run + 1} {label}: {peak:.1f} MiB", file=sys.stderr, flush=True)
        print(
            f"busy: {args.tasks} no-op tasks, concurrency {args.concurrency}, one worker "
            f"process, {args.runs} interleaved round(s); load average after: {peers_setup.load()}"
        )
        print("| system | root | venv | peak RSS MiB [range] | peer | x peer RSS |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, root in systems:
            rows = peaks[(name, root)]
            peer = PEER_OF.get(name)
            base = peaks.get((peer, None), []) if peer else []
            venv = _venv(name)
            print(
                f"| {name} | {root or '-'} | {venv} | {statistics.median(rows):.1f} "
                f"[{min(rows):.1f}-{max(rows):.1f}] | {peer if base else '-'} | "
                f"{_ratio(rows, base) if base else '-'} |"
            )
        if starts:
            print(
                f"start-up: {args.startup} `worker run` per round on an empty rail (drain mode), "
                "after one unmeasured run; medians over every round's runs"
            )
            print("| system | root | CPU ms [range] | wall ms | imports (-X importtime) |")
            print("| --- | --- | --- | --- | --- |")
            for key, times in starts.items():
                cpu = [t[0] for t in times]
                count, own_ms = imports.get(key, (0, 0.0))
                print(
                    f"| {key[0]} | {key[1]} | {statistics.median(cpu):.0f} "
                    f"[{min(cpu):.0f}-{max(cpu):.0f}] | "
                    f"{statistics.median(t[1] for t in times):.0f} | "
                    f"{count} modules, {own_ms:.0f} ms |"
                )
        for name, root in systems:
            if root is not None:
                print(
                    f"{name} ({root}): the floor (interpreter, asyncio with OpenSSL, anyio, "
                    "uvloop, click, pydantic with one model, pydantic-settings, the rail's "
                    f"driver) "
                    f"{_floor(pythons[(name, root)], name):.1f} MiB"
                )
        for name, root in systems:
            if root is None:
                continue
            python = pythons[(name, root)]
            run_args = (root, name, python, args.event_loop, args.tasks, args.concurrency)
            profiled = (
                None
                if args.no_profile
                else _run(*run_args, profiled=True, pg=pg, trace=args.tracemalloc)
            )
            _report(f"{root} [{name}]", clean[(name, root)], profiled, args.top)
    finally:
        if pg is not None:
            pg.destroy()


if __name__ == "__main__":
    main()
