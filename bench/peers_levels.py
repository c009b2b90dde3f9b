"""Every worker's log level in :mod:`bench.peers` (``--log-level``), and the same systems at
several levels side by side.

The benchmarks run every worker at WARNING, ours and the peers'; this worker's own default is
INFO, which costs a no-op task more (its per-run lines, each through the secret-scrubbing
filter). ``--log-level INFO`` measures every system at INFO; ``--log-level WARNING,INFO`` runs
each system at each level in every round, interleaved like the systems themselves, so the
cost of a level is read from runs under the same load. Each level's rows are set beside the
best peer at the same level, and :func:`level_table` sets each system beside itself at the
first level.

A level reaches the workers through their environment, read when each is spawned: ours take
``BACKLOG_WORKER_LOG_LEVEL`` (over their configuration file's WARNING), the peers' runners
:data:`bench.peer_workers.LOG_LEVEL_ENV`.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable

from bench.peer_drains import Result
from bench.peer_workers import LOG_LEVEL_ENV

#: The levels ``--log-level`` takes.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: What a row's system name carries when the run measures several levels.
MARK = " log="

Runner = Callable[[int, int, int], Result]


def parse_levels(text: str) -> list[str]:
    """``WARNING,info`` -> ``["WARNING", "INFO"]``; a ValueError names what is wrong."""
    levels = [level.strip().upper() for level in text.split(",") if level.strip()]
    unknown = [level for level in levels if level not in LOG_LEVELS]
    if unknown or not levels:
        raise ValueError(
            f"--log-level: unknown level(s) {', '.join(unknown) or repr(text)}; "
            f"known: {', '.join(LOG_LEVELS)}"
        )
    if len(set(levels)) != len(levels):
        raise ValueError(f"--log-level: a level is given twice in {text!r}")
    return levels


def set_level(level: str) -> None:
    """Have every worker spawned from now on log at ``level``, ours and the peers'."""
    os.environ["BACKLOG_WORKER_LOG_LEVEL"] = os.environ[LOG_LEVEL_ENV] = level


def per_level(runners: dict[str, Runner], levels: list[str]) -> dict[str, Runner]:
    """Each runner once per level, named ``system log=LEVEL``, setting its level first."""

    def at(level: str, runner: Runner) -> Runner:
        def run(n: int, procs: int, concurrency: int) -> Result:
            set_level(level)
            return runner(n, procs, concurrency)

        return run

    return {
        f"{name}{MARK}{level}": at(level, runner)
        for level in levels
        for name, runner in runners.items()
    }


def split(label: str) -> tuple[str, str | None]:
    """``embedded log=INFO`` -> ``("embedded", "INFO")``; ``embedded`` -> ``("embedded", None)``."""
    name, _, level = label.partition(MARK)
    return name, level or None


def level_table(
    systems: list[str],
    levels: list[str],
    procs_list: list[int],
    results: dict[tuple[str, int], list[Result]],
) -> list[str]:
    """Each system at each level beside itself at the first level: medians of per-round
    ratios of tasks/s and of CPU per task."""
    from bench.peers import ratio

    first = levels[0]
    lines = [
        "",
        f"| system | procs | log level | tasks/s [range] | CPU us/task | x {first} tasks/s "
        f"| x {first} CPU/task |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for procs in procs_list:
        for name in systems:
            base = results.get((f"{name}{MARK}{first}", procs), [])
            for level in levels:
                rows = results.get((f"{name}{MARK}{level}", procs))
                if not rows:
                    continue
                tps = [r["tasks_per_s"] for r in rows]
                cpu = statistics.median(r["cpu_us_per_task"] for r in rows)
                cells = [
                    ratio(rows, base, "tasks_per_s"),
                    ratio(rows, base, "cpu_us_per_task"),
                ]
                shown = " | ".join("-" if c is None else f"{c:.2f}" for c in cells)
                lines.append(
                    f"| {name} | {procs} | {level} | {statistics.median(tps):.0f} "
                    f"[{min(tps):.0f}-{max(tps):.0f}] | {cpu:.0f} | {shown} |"
                )
    return lines
