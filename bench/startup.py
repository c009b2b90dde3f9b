"""Where a worker's start-up CPU goes, in instructions (callgrind): by stage, kind and module.

    python -m bench.startup [--rail embedded,postgres] [--root DIR ...] [--top 25]
                            [--classes N] [--python PATH | --shared-venv]

A ``worker run`` of each ``--root`` (default: this tree; add an older tree, e.g. a ``git
worktree`` of main, to compare in the same run) starts on an empty rail in drain mode: it reads
its configuration, opens the rail, registers, finds nothing to claim and exits. That is the
start-up a 5,000-task drain pays once (issue 31). It runs once unmeasured (bytecode cache
written), then once under ``valgrind --tool=callgrind``, whose instruction counts do not move
with the machine's load, unlike CPU time on a shared machine.

The measured process carries a small hook (:data:`_HOOK`) that calls ``zlib.crc32`` at each
boundary it marks, and callgrind writes its counters at each such call
(``--dump-before=zlib_crc32``), so every instruction falls in one segment, attributed to what
was running: the module being executed (its own code, nested imports counted to themselves), a
dataclass being created (``dataclasses`` generates and compiles its methods from source: the
class's module is named), a pydantic model class being created (``ModelMetaclass``), or one of
the run's stages after the imports (:data:`STAGES`: wrapped functions of the ``run`` command
and the daemon). What is printed per root and rail:

* the total, and what the hook's own calls add (against an unhooked callgrind run);
* by stage: the interpreter's start, the imports up to ``worker.cli.run``, each run stage, the
  interpreter's exit;
* by kind: this project's dataclasses, pydantic model classes and other module code; the
  libraries' (the same three); the run's own work (configuration, event loop, rail, calls);
* the top ``--top`` modules by instructions (their classes' creation included), and the count
  of modules imported (this project's and the others');
* with ``--classes N``, how many dataclasses and pydantic model classes of this project were
  created, and the N costliest (``DC:module#Class``, ``PM:module#Class``).

The rail is SQLite (``embedded``) or a PostgreSQL server started for the run at stock
durability (``postgres``, :class:`bench.peers_setup.StockPgServer`). The interpreter is a venv
holding only the project's runtime requirements (:mod:`bench.peers_venvs`, as ``bench.memory``
uses), unless ``--shared-venv`` (this interpreter) or ``--python``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench import callgrind

ROOT = Path(__file__).resolve().parents[1]
RAILS = ("embedded", "postgres")
#: This project's top-level packages (the rest is "libraries").
OURS = ("worker", "tracker_client", "plugins")
#: The run's stages after the imports: (module, attribute, label); a function of an older tree
#: that lacks one is skipped.
STAGES = (
    ("worker.cli.run", "load_selected", "configuration"),
    ("worker.cli.run", "_setup_logging", "logging"),
    ("worker.cli.run", "build_roles", "executors"),
    ("worker.cli.run", "open_for_worker", "rail opened"),
)
#: Calls of the tracker the daemon makes at start, each a stage of its own.
TRACKER_CALLS = ("ping", "health", "capabilities", "register_worker", "claim_many", "queue_stats")

#: The hook in the measured process (``%(events)s``: where it writes its events at exit). Each
#: event is ``[kind, name]``: ``+``/``-`` around a module's execution, a class's creation
#: (``name`` ``DC:module`` or ``PM:module``), a stage (``S:label``); each is followed by a
#: ``zlib.crc32`` call, at which callgrind dumps its counters.
_HOOK = r"""
import sys, zlib, atexit, importlib.abc, json
_events = []
_crc = zlib.crc32
def _enter(name):
    _events.append(["+", name]); _crc(b"")
def _leave(name):
    _events.append(["-", name]); _crc(b"")
def _patch_models(module):
    meta = module.ModelMetaclass
    inner = meta.__new__
    def __new__(mcs, cls_name, bases, namespace, *args, **kwargs):
        key = "PM:" + str(namespace.get("__module__", "?")) + "#" + str(cls_name)
        _enter(key)
        try:
            return inner(mcs, cls_name, bases, namespace, *args, **kwargs)
        finally:
            _leave(key)
    meta.__new__ = __new__
def _patch_dataclasses(module):
    inner = module._process_class
    def _process_class(cls, *args, **kwargs):
        key = "DC:" + cls.__module__ + "#" + cls.__qualname__
        _enter(key)
        try:
            return inner(cls, *args, **kwargs)
        finally:
            _leave(key)
    module._process_class = _process_class
def _patch_run(module):
    for mod_name, attr, label in %(stages)r:
        if mod_name == module.__name__ and hasattr(module, attr):
            _wrap(module, attr, label)
def _wrap(module, attr, label):
    import inspect
    inner = getattr(module, attr)
    if inspect.iscoroutinefunction(inner):
        async def wrapped(*args, **kwargs):
            _enter("S:" + label)
            try:
                return await inner(*args, **kwargs)
            finally:
                _leave("S:" + label)
    else:
        def wrapped(*args, **kwargs):
            _enter("S:" + label)
            try:
                return inner(*args, **kwargs)
            finally:
                _leave("S:" + label)
    setattr(module, attr, wrapped)
def _patch_worker(module):
    cls = module.Worker
    inner = cls.run
    async def run(self, *args, **kwargs):
        for name in %(calls)r:
            call = getattr(self.tracker, name, None)
            if call is not None:
                _wrap_call(self.tracker, name, call)
        _enter("S:worker")
        try:
            return await inner(self, *args, **kwargs)
        finally:
            _leave("S:worker")
    cls.run = run
def _wrap_call(tracker, name, call):
    async def wrapped(*args, **kwargs):
        _enter("S:" + name)
        try:
            return await call(*args, **kwargs)
        finally:
            _leave("S:" + name)
    try:
        setattr(tracker, name, wrapped)
    except AttributeError:
        pass
_AFTER = {
    "pydantic._internal._model_construction": _patch_models,
    "worker.cli.run": _patch_run,
    "worker.daemon.worker": _patch_worker,
}
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                loader = spec.loader
                inner = getattr(loader, "exec_module", None)
                if inner is not None and not isinstance(loader, type):
                    def exec_module(module, inner=inner, name=name):
                        _enter(name)
                        try:
                            inner(module)
                            if name in _AFTER:
                                _AFTER[name](module)
                        finally:
                            _leave(name)
                    loader.exec_module = exec_module
                return spec
        return None
import dataclasses
_patch_dataclasses(dataclasses)
sys.meta_path.insert(0, _Finder())
def _exit():
    with open(%(events)r, "w") as f:
        json.dump(_events, f)
atexit.register(_exit)
"""

#: The measured worker: ``worker run --config CONFIG`` of ROOT with a no-op callable of its own
#: (``bench_startup_noop:run``), as :mod:`bench.memory` runs it.
_CHILD = """
import sys
root, config = sys.argv[1:3]
sys.path.insert(0, root)
noop = type(sys)("bench_startup_noop")
async def run(ctx):
    from plugins.api import Transition
    return Transition()
noop.run = run
sys.modules[noop.__name__] = noop
sys.argv = ["backlog-worker", "run", "--config", config]
from worker.cli import main
main()
"""


def attribute(events: list[list[str]], segments: list[int]) -> dict[str, int]:
    """Instructions per owner: ``segments[0]`` ran before the first event, ``segments[i + 1]``
    after event ``i``, owned by what was innermost then (a module, ``DC:``/``PM:`` module, a
    ``S:`` stage; ``<start>`` before the first event, ``<top>`` where nothing marked runs: the
    ``run`` command between its stages, ``<exit>`` after the last event)."""
    if len(segments) != len(events) + 1:
        raise ValueError(f"{len(events)} events but {len(segments)} segments")
    owned: Counter[str] = Counter({"<start>": segments[0]})
    stack: list[str] = []
    last = len(events) - 1
    for i, ((kind, name), count) in enumerate(zip(events, segments[1:], strict=True)):
        _step(stack, kind, name)
        owned[stack[-1] if stack else ("<exit>" if i == last else "<top>")] += count
    return dict(owned)


def _step(stack: list[str], kind: str, name: str) -> None:
    """Apply one event to the stack of what runs. Stages of concurrent tasks (the daemon's
    tracker calls) may end out of order: the latest open one of that name ends."""
    if kind == "+":
        stack.append(name)
        return
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] == name:
            del stack[i]
            return
    raise ValueError(f"event -{name} ends nothing open ({stack[-3:]!r})")


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def kinds(owned: dict[str, int]) -> dict[str, int]:
    """The instructions of :func:`attribute` by kind (see the module docstring)."""
    out: Counter[str] = Counter()
    for owner, count in owned.items():
        if owner in ("<start>", "<exit>"):
            out["interpreter start" if owner == "<start>" else "interpreter exit"] += count
        elif owner.startswith("S:") or owner == "<top>":
            out["run (own work, after imports)"] += count
        else:
            kind, _, module = owner.partition("#")[0].rpartition(":")
            whose = "ours" if _ours(module) else "libraries"
            what = {"DC": "dataclasses", "PM": "pydantic model classes", "": "module code"}[kind]
            out[f"{whose}: {what}"] += count
    return dict(out)


def stages(events: list[list[str]], segments: list[int]) -> list[tuple[str, int]]:
    """Instructions by stage, in order of first appearance: the interpreter's start, the imports
    before the first stage, each ``S:`` stage (a nested one on its own line; the imports a stage
    triggers included), the ``run`` command between stages, the interpreter's exit."""
    rows: list[tuple[str, int]] = [("interpreter start", segments[0])]
    current: list[str] = []
    began = False
    last = len(events) - 1
    for i, ((kind, name), count) in enumerate(zip(events, segments[1:], strict=True)):
        if name.startswith("S:"):
            began = True
            _step(current, kind, name[2:])
        if current:
            label = current[-1]
        elif i == last:
            label = "interpreter exit"
        else:
            label = "between stages (run command, event loop)" if began else "imports"
        if rows and rows[-1][0] == label:
            rows[-1] = (label, rows[-1][1] + count)
        else:
            rows.append((label, count))
    merged: Counter[str] = Counter()
    order: list[str] = []
    for label, count in rows:
        if label not in merged:
            order.append(label)
        merged[label] += count
    return [(label, merged[label]) for label in order]


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = str(root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed worker runs from cached bytecode
    return env


def measure(python: str, root: Path, config: Path, work: Path) -> dict[str, Any]:
    """One hooked callgrind run (after an unmeasured one) and one unhooked: the events, their
    segments, the unhooked total and the modules imported."""
    events_file = work / "events.json"
    hook = _HOOK % {"events": str(events_file), "stages": STAGES, "calls": TRACKER_CALLS}
    argv = [python, "-c", hook + _CHILD, str(root), str(config)]
    env = _env(root)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)
    out = work / "cg"
    for old in work.glob("cg*"):
        old.unlink()
    done = subprocess.run(
        [*callgrind.command(out), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"callgrind run failed ({done.returncode}): {done.stderr[-2000:]}")
    events = json.loads(events_file.read_text())
    segments = [callgrind.totals(Path(f"{out}.{i}")) for i in range(1, len(events) + 1)]
    segments.append(callgrind.totals(out))
    unmarked = callgrind.command(Path(os.devnull), marks=False)
    plain = subprocess.run(
        [*unmarked, python, "-c", _CHILD, str(root), str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", plain.stderr)
    if plain.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({plain.returncode}): {plain.stderr[-2000:]}")
    modules = sorted({name for kind, name in events if kind == "+" and ":" not in name})
    return {
        "events": events,
        "segments": segments,
        "plain": int(found.group(1)),
        "modules": modules,
    }


def report(label: str, result: dict[str, Any], top: int, classes: int = 0) -> None:
    """Print one root's and rail's figures (see the module docstring)."""
    events, segments = result["events"], result["segments"]
    owned = attribute(events, segments)
    total = sum(segments)
    ours = [m for m in result["modules"] if _ours(m)]
    print(f"\n== {label}")
    print(
        f"total {total / 1e6:.1f} M instructions (hooked; unhooked {result['plain'] / 1e6:.1f} M); "
        f"modules executed through a loader: {len(result['modules'])} ({len(ours)} ours)"
    )
    print("by stage:")
    for name, count in stages(events, segments):
        print(f"  {count / 1e6:8.1f} M  {name}")
    print("by kind:")
    for name, count in sorted(kinds(owned).items(), key=lambda kv: -kv[1]):
        print(f"  {count / 1e6:8.1f} M  {100 * count / total:5.1f} %  {name}")
    per_module: Counter[str] = Counter()
    per_class: Counter[str] = Counter()
    for owner, count in owned.items():
        if not owner.startswith(("S:", "<")):
            per_module[owner.partition("#")[0].rpartition(":")[2]] += count
        if "#" in owner and _ours(owner.partition("#")[0].rpartition(":")[2]):
            per_class[owner] += count
    print(f"top {top} modules (their classes included):")
    for name, count in per_module.most_common(top):
        print(f"  {count / 1e6:8.1f} M  {name}")
    made = Counter(owner.partition(":")[0] for owner in per_class)
    print(
        f"this project's classes created: {made['DC']} dataclasses, {made['PM']} pydantic models;"
        f" the top {classes}:"
    )
    for name, count in per_class.most_common(classes):
        print(f"  {count / 1e6:8.1f} M  {name}")


def _rail(rail: str, work: Path, pg: Any) -> Path:
    """An empty rail of ``rail`` and a drain-mode configuration for it, in ``work``."""
    import anyio

    from bench.worker import _config, _seed

    db = work / "rail.db"
    url = f"sqlite:///{db}"
    if rail == "postgres":
        from bench.postgres import _seed as _pg_seed

        url = f"{pg.url}?schema=bench_{uuid.uuid4().hex[:12]}&pool_size=4"
        anyio.run(_pg_seed, url, 0)
    else:
        anyio.run(_seed, db, 0)
    config = _config(work, db, 10, drain=True)
    text = config.read_text().replace("bench.worker:noop", "bench_startup_noop:run")
    config.write_text(text.replace(f"sqlite:///{db}", url))
    return config


def main() -> None:
    """Measure each root on each rail and print where its start-up's instructions go."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rail", default="embedded", help="embedded, postgres (a,b)")
    parser.add_argument("--root", action="append", type=Path, default=[])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--classes", type=int, default=0, help="also list this project's N costliest classes"
    )
    parser.add_argument("--python", help="the interpreter our worker runs on")
    parser.add_argument("--shared-venv", action="store_true", help="run on this interpreter")
    args = parser.parse_args()
    rails = args.rail.split(",")
    unknown = [r for r in rails if r not in RAILS]
    if unknown:
        parser.error(f"unknown rail {unknown[0]!r}; known: {', '.join(RAILS)}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    roots = [r.resolve() for r in args.root] or [ROOT]
    pg = None
    if "postgres" in rails:
        from bench.peers_setup import StockPgServer
        from tests.postgres.server import require_postgres

        pg = StockPgServer.create(require_postgres())
        pg.start()
    try:
        for rail in rails:
            python = args.python or sys.executable
            if not (args.python or args.shared_venv):
                from bench import peers_venvs

                system = "ours-postgres" if rail == "postgres" else "ours"
                python = peers_venvs.python_for(system)
                print(f"{rail}: {peers_venvs.summary(system, python)}")
            for root in roots:
                with tempfile.TemporaryDirectory() as tmp:
                    work = Path(tmp)
                    config = _rail(rail, work, pg)
                    report(
                        f"{root} on {rail}",
                        measure(python, root, config, work),
                        args.top,
                        args.classes,
                    )
    finally:
        if pg is not None:
            pg.destroy()


if __name__ == "__main__":
    main()
