"""Counting a child's instructions with ``valgrind --tool=callgrind``, cut by marks.

The benches that count instructions (``bench.startup``, ``bench.pg_rail --callgrind``,
``bench.worker_overhead --callgrind``) run a child under :func:`command` and have it call
``zlib.crc32`` at each point it wants counted apart: callgrind writes its counters out before
every such call (``--dump-before=zlib_crc32``), so dump ``OUT.1`` holds what ran up to the first
mark, ``OUT.2`` what ran between the first and the second, and ``OUT`` what ran after the last.
Instruction counts do not move with the machine's load, which is why a shared machine can judge a
change by them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["command", "totals"]


def command(out: Path, *, marks: bool = True) -> list[str]:
    """The argv prefix that runs a child under callgrind (not its own children), dumping to
    ``out`` (``out.1``, ``out.2``, ... before each ``zlib.crc32`` call unless ``marks`` is
    false: one dump, its total also on valgrind's stderr as ``Collected : N``)."""
    return [
        *("valgrind", "--tool=callgrind", "--trace-children=no"),
        *(["--dump-before=zlib_crc32"] if marks else []),
        f"--callgrind-out-file={out}",
    ]


def totals(path: Path) -> int:
    """The instructions one callgrind dump counted (its ``totals:`` line)."""
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")
