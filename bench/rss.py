"""A child process's own peak RSS and CPU time, for the benchmarks.

``wait4``'s ``ru_maxrss`` is not the child's own peak: Linux folds the forked copy of the parent
(before ``exec``) into it, so a child of a 70 MiB benchmark process "peaks" at 70 MiB whatever it
does. The child's own high-water mark is ``VmHWM`` in ``/proc/<pid>/status`` (its address space
after ``exec``); :func:`reap` samples it until the child exits, then reaps it with ``wait4`` for
its CPU time (which is the child's own).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

__all__ = ["reap", "vm_hwm_kib"]

SAMPLE_S = 0.02


def vm_hwm_kib(pid: int) -> int | None:
    """``VmHWM`` of ``pid`` in KiB; None once it has exited (a zombie has none) or is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reap(procs: list[subprocess.Popen[bytes]]) -> list[tuple[float, float]]:
    """Wait for every process: (its own peak RSS in MiB, CPU seconds user + system) each."""
    peaks = dict.fromkeys((p.pid for p in procs), 0)
    usage: dict[int, tuple[float, float]] = {}
    while len(usage) < len(procs):
        for proc in procs:
            if proc.pid in usage:
                continue
            hwm = vm_hwm_kib(proc.pid)
            if hwm is not None:
                peaks[proc.pid] = max(peaks[proc.pid], hwm)
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                usage[proc.pid] = (peaks[proc.pid] / 1024, ru.ru_utime + ru.ru_stime)
        time.sleep(SAMPLE_S)  # sampling the children's own counters while they run
    return [usage[p.pid] for p in procs]
