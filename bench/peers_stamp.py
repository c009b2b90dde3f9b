"""The executor-start stamp of the pickup latency bench (:mod:`bench.peers_pickup`): a job
appends its sample id and the time it started to the file ``BENCH_PICKUP_FILE`` names.

Imported by this project's worker (:func:`stamp`, a ``python`` executor callable) and by the
peers' workers alike; it imports nothing of this project, so a peer's footprint stays its own.
"""

from __future__ import annotations

import os
import time
from typing import Any

ENV = "BENCH_PICKUP_FILE"


def write_stamp(sample: str) -> None:
    """Append ``sample`` and the time now (epoch seconds) to the stamp file."""
    now = time.time()
    with open(os.environ[ENV], "a", encoding="utf-8") as out:
        out.write(f"{sample} {now:.6f}\n")


async def stamp(ctx: Any) -> Any:
    """This project's executor: stamp the task's title (the sample id), succeed."""
    from plugins.api import Transition

    write_stamp(ctx.task.title)
    return Transition()
