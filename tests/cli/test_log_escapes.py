"""Log lines carry no terminal escape codes: uvicorn's records bring a ``color_message`` extra
(the message again with ANSI colours) that the plain and JSON formats must not print as a field.

``dashboard`` and ``tracker serve`` run as real processes on 127.0.0.1 (``--port 0``) with
stderr in a file: the ``plain`` lines an operator's ``2>&1 | head`` shows, and the ``journal``
lines a unit writes (``$JOURNAL_STREAM`` naming that file, as systemd names its stream).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import Rail
from tests.remote.fixtures import wait_listening

COMMANDS = {"dashboard": ["dashboard"], "tracker serve": ["tracker", "serve"]}


def _log_of(rail: Rail, command: list[str], fmt: str, log: Path) -> str:
    """Start ``backlog-worker COMMAND`` on ``rail``, wait until it listens, stop it: its log."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("BACKLOG_WORKER_") and k != "JOURNAL_STREAM"
    }
    with log.open("wb") as stderr:
        if fmt == "journal":
            st = os.fstat(stderr.fileno())
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", *command, "--tracker", rail.url, "--port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env,
        )  # fmt: skip
    try:
        wait_listening(log, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    return log.read_text(encoding="utf-8")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fmt", ["plain", "journal"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_uvicorn_lines_carry_no_colour_codes(
    rail: Rail, tmp_path: Path, name: str, fmt: str
) -> None:
    text = _log_of(rail, COMMANDS[name], fmt, tmp_path / "server.log")
    assert "Uvicorn running on http://127.0.0.1:" in text, text  # the line that had them
    assert text.startswith("<") == (fmt == "journal"), text  # the format asked for
    assert "color_message" not in text, text
    assert "\x1b" not in text and "\\u001b" not in text, text
