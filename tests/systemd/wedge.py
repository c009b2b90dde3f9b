"""A misbehaving ``python`` executor for the service tests: it blocks the worker's event loop.

It brackets the block with its own STATUS= datagrams to the test's fake notify socket, so the
test can check that no watchdog ping was sent while the loop was wedged.
"""

from __future__ import annotations

import socket
import time
from typing import Any


def _send(address: str, text: str) -> None:
    target = "\0" + address[1:] if address.startswith("@") else address
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(text.encode(), target)


async def block_the_loop(ctx: Any) -> None:
    """Send ``STATUS=wedge-start``, block the loop synchronously, send ``STATUS=wedge-end``."""
    address = str(ctx.options["notify"])
    _send(address, "STATUS=wedge-start")
    time.sleep(float(ctx.options["seconds"]))  # the bug being simulated: sync work on the loop
    _send(address, "STATUS=wedge-end")
