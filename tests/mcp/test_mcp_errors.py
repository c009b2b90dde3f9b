"""What the MCP server says when the rail refuses or cannot be reached: the rail's own words,
one line at start, and never a password of the rail's URL (docs/submit/mcp.md)."""

from __future__ import annotations

import subprocess

import pytest

from tests.mcp.kit import CLI
from tests.worker.daemonkit import clean_env
from tracker_client.errors import Conflict, TokenRefused, TrackerUnavailable
from tracker_client.mcp.tools import _refusal

pytestmark = pytest.mark.timeout(60)


def test_a_refusal_keeps_the_rails_words_and_masks_a_password() -> None:
    down = _refusal(TrackerUnavailable("cannot reach postgresql://app:hunter2@127.0.0.1:1/rail"))
    assert "hunter2" not in str(down) and "TrackerUnavailable" in str(down)
    conflict = _refusal(Conflict("task t-1 is already dead-lettered", code="terminal"))
    assert str(conflict) == "Conflict (terminal): task t-1 is already dead-lettered"
    forbidden = _refusal(TokenRefused("no", status=403, detail="POST /tasks: not in scope"))
    assert str(forbidden) == (
        "this server's credentials do not allow it (403): POST /tasks: not in scope"
    )


def test_an_unreachable_rail_is_one_line_at_start_without_its_password() -> None:
    done = subprocess.run(
        [*CLI, "mcp", "--tracker", "postgresql://app:hunter2@127.0.0.1:1/rail"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
        timeout=50,
        check=False,
    )
    assert done.returncode == 3, done.stderr  # the rail is unreachable
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "hunter2" not in done.stderr + done.stdout
    assert done.stdout == ""
