"""What idle workers cost: CPU and requests per second of N idle ``backlog-worker run`` processes.

    python -m bench.idle [--seconds 10] [--warmup 6] [--workers 3]
                         [--rails served,embedded,postgres] [--trees .,/tmp/base] [--rounds 1]

For each rail kind, a fresh rail with one pipeline and no tasks: ``served`` is one
``backlog-worker tracker serve`` process, each worker reaching it through its own counting TCP
proxy (so requests are counted per worker); ``embedded`` is one SQLite file the workers share;
``postgres`` a fresh schema on a PostgreSQL server started for the run (Debian's binaries,
stock durability: :class:`bench.peers_setup.StockPgServer`). The workers run with the default
worker settings. Once every worker says it is running and
``--warmup`` seconds more have passed (the idle back-off reaches its ceiling), CPU time (utime +
stime from ``/proc/PID/stat``), wake-ups (context switches of all the worker's threads, from
``/proc/PID/task/*/status``: voluntary ones, each a wake-up after blocking, a figure the
machine's load hardly changes; involuntary ones, preemptions, grow with it) and requests are
sampled over ``--seconds``.

What the rail writes over the same window is printed on a line of its own. On SQLite
(``embedded``, ``served``): commits (the WAL index's change counter, which every committed
write transaction moves, read from the ``-shm`` file) and the claim records kept under
idempotency keys (``claim_many`` rows in ``idempotency``: an idle round's empty claims). On
PostgreSQL: the server's CPU, its committed transactions (``pg_stat_database``, reads
included) and the rows the rail's tables wrote (``pg_stat_user_tables``: inserts, updates and
deletes), the busiest tables named. PostgreSQL's counts reach its views when a backend goes
idle, at most every second and within 10 s, so they lag the window by up to that.

``--trees`` measures several source trees (``git worktree`` checkouts) in turn in each of
``--rounds`` rounds, with this interpreter run from the tree (its directory and
``PYTHONPATH``): the same-run before/after of a change. The load average is printed with each
measurement.

The target (issue 10, item 17): an idle worker uses at most 2 % of a core and 1 request/s.
A benchmark, not a test: it prints the figures and exits 0 (1 if a worker died).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.postgres.server import PgServer

CLI = (sys.executable, "-m", "worker")
PIPELINE = """
name = "flow"
[definition]
initial = "todo"
[definition.states.todo]
agent_role = "coder"
[definition.states.done]
terminal = true
[[definition.transitions]]
from = "todo"
to = "done"
trigger = "complete"
"""


def _env(tree: Path | None = None) -> dict[str, str]:
    drop = ("BACKLOG_WORKER_", "NOTIFY_SOCKET", "WATCHDOG_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def _cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _switches(pid: int) -> tuple[int, int, int]:
    """Voluntary context switches (the thread blocked, then was woken: wake-ups) and
    involuntary ones (preempted: these grow with the machine's load) of all ``pid``'s threads,
    and how many threads (one that ends within the window takes its switches with it)."""
    woken = preempted = threads = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue
        threads += 1
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                woken += int(line.split(":")[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                preempted += int(line.split(":")[1])
    return woken, preempted, threads


class CountingProxy:
    """A TCP proxy to ``upstream`` counting connections (the worker sends one request each) and
    keeping each request line (what an idle worker sends, when the rate is over)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.connections = 0
        self.lines: list[tuple[float, str]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = await reader.readline()
        self.lines.append((time.monotonic(), first.decode("latin-1").strip()))
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        up_writer.write(first)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _wait_for(predicate: object, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def _config(path: Path, url: str) -> Path:
    path.write_text(
        f'[tracker]\nurl = "{url}"\n'
        '[[roles]]\nname = "coder"\nexecutor = "command"\n'
        '[roles.options]\nargv = ["true"]\n'
    )
    return path


class RailCounts:
    """What a rail wrote so far (see the module docstring): read before and after the window."""

    def __init__(self, kind: str, db: Path, pg: PgRail | None) -> None:
        self.kind = kind
        self.db = db
        self.pg = pg

    def read(self) -> dict[str, float]:
        """The rail's counters now."""
        if self.pg is not None:
            return self.pg.read()
        shm = self.db.with_name(self.db.name + "-shm")
        try:
            head = shm.read_bytes()[:12]
            changes = struct.unpack("=I", head[8:12])[0]
        except (OSError, struct.error):
            changes = 0
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            row = conn.execute(
                "SELECT count(*) FROM idempotency WHERE operation = 'claim_many'"
            ).fetchone()
        finally:
            conn.close()
        return {"commits": float(changes), "claim records": float(row[0])}

    @staticmethod
    def line(label: str, before: dict[str, float], after: dict[str, float], s: float) -> str:
        """The rates over ``s`` seconds, one line."""
        rates = {k: (after[k] - before.get(k, 0.0)) / s for k in after}
        shown = [
            f"{k} {v:5.2f}" if k.endswith("%") else f"{k}/s {v:6.2f}"
            for k, v in rates.items()
            if not k.startswith("rows ")
        ]
        tables = sorted(
            ((v, k[5:]) for k, v in rates.items() if k.startswith("rows ") and v > 0),
            reverse=True,
        )
        if tables:
            shown.append("(" + ", ".join(f"{t} {v:.2f}" for v, t in tables[:4]) + ")")
        return f"{label:8} rail    : " + "  ".join(shown)


class PgRail:
    """One schema of the bench's PostgreSQL server, and the server's counters."""

    def __init__(self, server: PgServer, schema: str) -> None:
        self.server = server
        self.schema = schema

    @property
    def url(self) -> str:
        """The rail's URL."""
        return f"{self.server.url}?schema={self.schema}"

    def read(self) -> dict[str, float]:
        """Server CPU seconds, committed transactions, rows written (in all, and per table)."""
        import psycopg

        from bench.postgres import _server_cpu_s

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            (commits,) = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone() or (0,)
            rows = conn.execute(
                "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables "
                "WHERE schemaname = %s",
                (self.schema,),
            ).fetchall()
        found = {
            "server cpu %": _server_cpu_s(self.server) * 100,
            "commits": float(commits),
            "row writes": float(sum(n for _, n in rows)),
        }
        found.update({f"rows {name}": float(n) for name, n in rows})
        return found

    def drop(self) -> None:
        """Drop the schema."""
        import psycopg

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")


_server: PgServer | None = None


def _pg_server() -> PgServer:
    """The bench's PostgreSQL server (started on first use, destroyed by :func:`main`)."""
    global _server
    if _server is None:
        from bench.peers_setup import StockPgServer
        from tests.postgres.server import find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("PostgreSQL is not installed: apt-get install postgresql")
        server = StockPgServer.create(bindir)
        try:
            server.start()
        except BaseException:
            server.destroy()
            raise
        _server = server
    return _server


def bench_rail(
    kind: str, workers: int, seconds: float, warmup: float, tree: Path | None = None
) -> int:
    """Measure ``workers`` idle workers on a fresh rail of ``kind`` (the code of ``tree``, None:
    this one); print one line each, and one of what the rail wrote."""
    label = f"{kind}@{tree}" if tree is not None else kind
    with tempfile.TemporaryDirectory(prefix=f"bench-idle-{kind}-") as tmp:
        base = Path(tmp)
        db = base / "rail.db"
        pg = PgRail(_pg_server(), f"idle_{uuid.uuid4().hex[:12]}") if kind == "postgres" else None
        rail_url = pg.url if pg is not None else f"sqlite://{db}"
        (base / "flow.toml").write_text(PIPELINE)
        subprocess.run(
            [*CLI, "pipeline", "create", "-f", str(base / "flow.toml"), "--tracker", rail_url],
            check=True,
            capture_output=True,
            env=_env(tree),
            cwd=tree,
        )
        procs: list[subprocess.Popen[bytes]] = []
        proxies: list[CountingProxy] = []
        server: subprocess.Popen[bytes] | None = None
        logs: list[Path] = []
        counts = RailCounts(kind, db, pg)
        try:
            urls = [rail_url] * workers
            if kind == "served":
                serve_log = base / "serve.log"
                with serve_log.open("wb") as err:
                    server = subprocess.Popen(
                        [*CLI, "tracker", "serve", "--tracker", rail_url, "--port", "0"],
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        env=_env(tree),
                        cwd=tree,
                    )
                found = _wait_for(
                    lambda: re.search(
                        r"listening on http://127\.0\.0\.1:(\d+)", serve_log.read_text()
                    ),
                    30,
                    "tracker serve",
                )
                port = int(found.group(1))  # type: ignore[attr-defined]
                proxies = [CountingProxy(port) for _ in range(workers)]
                urls = [f"http://127.0.0.1:{p.port}" for p in proxies]
            for i, url in enumerate(urls):
                log = base / f"worker{i}.log"
                logs.append(log)
                with log.open("wb") as err:
                    procs.append(
                        subprocess.Popen(
                            [*CLI, "run", "--config", str(_config(base / f"w{i}.toml", url))],
                            stdout=subprocess.DEVNULL,
                            stderr=err,
                            env=_env(tree),
                            cwd=tree,
                        )
                    )
            for log in logs:
                _wait_for(lambda log=log: "running:" in log.read_text(), 60, f"{log.name}")
            time.sleep(warmup)
            load = os.getloadavg()[0]
            cpu0 = [_cpu_s(p.pid) for p in procs]
            sw0 = [_switches(p.pid) for p in procs]
            req0 = [p.connections for p in proxies]
            server0 = _cpu_s(server.pid) if server is not None else 0.0
            rail0 = counts.read()
            t0 = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - t0
            rail1 = counts.read()
            cpu1 = [_cpu_s(p.pid) for p in procs]
            sw1 = [_switches(p.pid) for p in procs]
            req1 = [p.connections for p in proxies]
            for i in range(workers):
                cpu = (cpu1[i] - cpu0[i]) / elapsed * 100
                rate = f"{(req1[i] - req0[i]) / elapsed:5.2f}" if proxies else "    -"
                woken = (sw1[i][0] - sw0[i][0]) / elapsed
                preempted = (sw1[i][1] - sw0[i][1]) / elapsed
                threads = f"{sw0[i][2]}->{sw1[i][2]}"
                print(
                    f"{label:8} worker {i}: cpu {cpu:5.2f} %  wake-ups/s {woken:5.1f} "
                    f"(preempted/s {preempted:4.1f}, threads {threads})  requests/s {rate}  "
                    f"load {load:.2f}",
                    flush=True,
                )
            if server is not None:
                cpu = (_cpu_s(server.pid) - server0) / elapsed * 100
                print(f"{label:8} server  : cpu {cpu:5.2f} %", flush=True)
            print(RailCounts.line(label, rail0, rail1, elapsed), flush=True)
            return 0 if all(p.poll() is None for p in procs) else 1
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            if pg is not None:
                pg.drop()


def main() -> int:
    """Parse the flags, measure each rail kind."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rails", default="served,embedded")
    parser.add_argument(
        "--trees",
        default="",
        help="source trees to measure in turn, comma-separated (default: this one)",
    )
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    trees: list[Path | None] = [Path(t).resolve() for t in args.trees.split(",") if t] or [None]
    code = 0
    try:
        for _ in range(args.rounds):
            for tree in trees:
                for kind in args.rails.split(","):
                    code |= bench_rail(kind.strip(), args.workers, args.seconds, args.warmup, tree)
    finally:
        if _server is not None:
            _server.destroy()
    return code


if __name__ == "__main__":
    sys.exit(main())
