"""``tracker serve`` is loud about what is open (issue 10, item 18).

Without a token it logs a WARNING naming what is open, on 127.0.0.1 too (any local user or
process can reach a loopback port); with ``--token`` it warns that the token is readable in
``/proc/PID/cmdline``. A token from ``--token-file`` or the environment draws neither.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from tracker_client.embedded import EmbeddedTracker

TOKEN = "warn-token-0123456789"
SERVE = [sys.executable, "-m", "worker", "tracker", "serve"]


async def _make_rail(path: Path) -> None:
    await (await EmbeddedTracker.open(str(path))).aclose()


def _serve(tmp_path: Path, *extra: str, env_token: str | None = None) -> str:
    """Start ``tracker serve`` until it listens, stop it, and return what it logged."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    if env_token is not None:
        env["BACKLOG_WORKER_API_TOKEN"] = env_token
    log = tmp_path / "serve.log"
    rail = tmp_path / "rail.db"
    anyio.run(_make_rail, rail)  # the rail exists, as after `pipeline create`
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*SERVE, "--tracker", f"sqlite://{rail}", "--port", "0", *extra],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        deadline = time.monotonic() + 30
        while not re.search(r"listening on http://", log.read_text()):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    return log.read_text()


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if " WARNING " in line]


@pytest.mark.slow
def test_no_token_on_loopback_is_a_warning_naming_what_is_open(tmp_path: Path) -> None:
    (line,) = _warnings(_serve(tmp_path))
    assert "without an api token" in line
    assert "127.0.0.1" in line and "any local user or process" in line
    assert "admin route" in line and "claim work" in line and "--token-file" in line


@pytest.mark.slow
def test_token_on_the_command_line_is_a_warning(tmp_path: Path) -> None:
    text = _serve(tmp_path, "--token", TOKEN)
    (line,) = _warnings(text)
    assert "--token" in line and "/proc/PID/cmdline" in line and "--token-file" in line
    assert TOKEN not in text


@pytest.mark.slow
@pytest.mark.parametrize("source", ["file", "env"])
def test_token_from_a_file_or_the_environment_is_quiet(tmp_path: Path, source: str) -> None:
    if source == "file":
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)  # a world-readable one is warned about (test_auth_throttle)
        text = _serve(tmp_path, "--token-file", str(token_file))
    else:
        text = _serve(tmp_path, env_token=TOKEN)
    assert _warnings(text) == [], text
    assert "admin token required" in text
