"""``tracker serve``'s instructions per task under callgrind, by thread, while a worker drains.

    python -m bench.serve_instr [--tasks 2000] [--concurrency 10] [--ab OLD_TREE] [--keep DIR]

``bench.peers`` prints ``tracker serve``'s CPU per task, which a loaded 2-core machine moves by
a third between rounds. Instruction counts do not move: this bench runs ``tracker serve`` under
``valgrind --tool=callgrind --separate-threads=yes`` on a fresh SQLite file seeded with
``--tasks`` no-op tasks, zeroes its counters once it listens (start-up left out), lets one real
worker (``python -m worker run``, concurrency ``--concurrency``, the no-op python executor) drain
them over HTTP, dumps the counters, and prints each thread's instructions per task: the event
loop (thread 1: HTTP, JSON, the routes), the database thread (the busiest of the others: the
rules and SQLite), the rest; and the keyed writes per task (the worker keys every report and
every riding claim: ``keyed claim_many`` is its requests per task). ``--ab OLD_TREE`` runs
the same with that tree's server (and seeding) first, the worker being this tree's for both.
``--keep DIR`` keeps the callgrind files there (for ``callgrind_annotate``). Under callgrind
the server runs ~50x slower; its batches still carry ~14 reports (0.073 requests per task
against ~0.071 in a timed drain), but compare trees with one another, not with
``bench.peers``. Start-up is left out; the first requests' lazy model builds are not.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench import callgrind
from bench.remote import listening_url, serve_command
from bench.worker import ROOT, _seed, _seed_with, _spawn, noop_config, worker_env


def _thread_totals(files: list[Path]) -> dict[int, int]:
    """Instructions by thread number (1 = the main thread) from one dump's per-thread files
    (``callgrind.out.PID.N-TT``)."""
    out: dict[int, int] = {}
    for path in files:
        out[int(path.name.rsplit("-", 1)[1])] = callgrind.totals(path)
    return out


def measure(tasks: int, concurrency: int, root: Path | None, keep: Path | None) -> dict[str, float]:
    """One callgrind drain with the server of ``root`` (this tree when None): instructions per
    task by thread (``loop``, ``db``, ``other``) and the drain's wall seconds."""
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "served.db"
        if root is None:
            anyio.run(_seed, db, tasks)
        else:
            _seed_with(root, db, tasks)
        out = tmp / "callgrind.out"
        log = tmp / "serve.log"
        tree = root or ROOT
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}.%p",
            *serve_command(db),
        ]
        with log.open("wb") as stderr:
            server = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=stderr, cwd=tree, env=_env(tree)
            )
        try:
            url = listening_url(server, log, "tracker serve under callgrind", timeout_s=600)
            subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True,
                           capture_output=True)  # fmt: skip
            config = noop_config(tmp / "bench.toml", url, concurrency=concurrency)
            started = time.monotonic()
            worker = _spawn(config)
            if worker.wait(3600) != 0:
                raise SystemExit(f"the worker exited with {worker.returncode}")
            wall = time.monotonic() - started
            subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True,
                           capture_output=True)  # fmt: skip
        finally:
            server.terminate()
            server.wait(120)
        with sqlite3.connect(db) as conn:
            # every keyed write the worker sent (a report's key, a claim's): its requests
            keyed = dict(conn.execute("SELECT operation, count(*) FROM idempotency GROUP BY 1"))
        dumps = sorted(tmp.glob(f"callgrind.out.{server.pid}.1-*"))
        if not dumps:
            raise SystemExit(f"no callgrind dump: {log.read_text()[-2000:]}")
        totals = _thread_totals(dumps)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for path in dumps:
                shutil.copy(path, keep / f"{'old' if root else 'new'}-{path.name}")
    loop = totals.pop(1, 0)
    db_thread = max(totals.values(), default=0)
    rest = sum(totals.values()) - db_thread
    result: dict[str, float] = {
        "loop": loop / tasks,
        "db": db_thread / tasks,
        "other": rest / tasks,
        "wall_s": wall,
    }
    for operation, count in sorted(keyed.items()):
        result[f"keyed {operation}"] = count / tasks
    requests = keyed.get("claim_many", 0)
    if requests:  # a busy worker's every finish-many carries a keyed claim
        result["loop per request"] = loop / requests
        result["db per request"] = db_thread / requests
    return result


def _env(tree: Path) -> dict[str, str]:
    """The server's environment: ``tree`` on the import path and its modules compiled first,
    their bytecode kept outside the tree (``PYTHONPYCACHEPREFIX``, a directory of its own per
    tree under the temp dir): otherwise a module the server imports on its first request is
    compiled from source inside the measured drain (~20-40 M instructions)."""
    env = worker_env(str(tree))
    digest = hashlib.sha256(str(tree).encode()).hexdigest()[:12]
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / f"serve-instr-pyc-{digest}")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "tracker_client", "worker"],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return env


def main() -> None:
    """Parse the arguments, measure each tree, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--ab", type=Path, default=None, help="an older source tree")
    parser.add_argument("--keep", type=Path, default=None, help="keep the callgrind files here")
    args = parser.parse_args()
    if args.tasks < 1 or args.concurrency < 1:
        parser.error("--tasks and --concurrency: at least 1")
    if args.ab is not None and not (args.ab / "tracker_client" / "serve").is_dir():
        parser.error(f"--ab {args.ab}: not a source tree with tracker_client/serve")
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.ab is not None:
        trees.insert(0, (str(args.ab), args.ab.resolve()))
    rows = {name: measure(args.tasks, args.concurrency, root, args.keep) for name, root in trees}
    keys = ["loop", "db", "other", "wall_s", "loop per request", "db per request"]
    keys += sorted({k for row in rows.values() for k in row if k.startswith("keyed")})
    print(f"tracker serve under callgrind, {args.tasks} no-op tasks, 1 worker x{args.concurrency}")
    print("per task:".ljust(32) + "".join(name[-20:].rjust(22) for name in rows))
    for key in keys:
        cells = "".join(f"{rows[name].get(key, 0):>22,.3f}" for name in rows)
        print(key.ljust(32) + cells)


if __name__ == "__main__":
    main()
