"""``backlog-worker limit set|list|clear`` on a real embedded rail file.

The limit is stored in the rail (every worker process sees it); each bad flag (a rate of 0, a
negative or garbage rate, a cap under 1, neither flag) is a clear error naming it, and the file
is left byte for byte as it was.
"""

from __future__ import annotations

import pytest

from tests.cli.conftest import Rail
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.timeout(60)


def test_set_list_clear(simple: Rail) -> None:
    limit = simple.json("limit", "set", "coder", "--rate", "20/min", "--max-running", "3")
    assert (limit["rate"], limit["rate_count"], limit["max_running"]) == ("20/min", 20, 3)
    table = simple.cli("limit", "list")
    assert table.exit_code == 0 and "coder" in table.stdout and "20/min" in table.stdout
    assert [lim["role"] for lim in simple.json("limit", "list")] == ["coder"]
    cleared = simple.cli("limit", "clear", "coder")
    assert cleared.exit_code == 0 and "cleared" in cleared.stdout
    assert simple.json("limit", "list") == []
    gone = simple.cli("limit", "clear", "coder")
    assert gone.exit_code == 1 and "coder" in gone.stderr


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--rate", "0/s"), "--rate"),
        (("--rate", "-1/min"), "--rate"),
        (("--rate", "lots"), "--rate"),
        (("--max-running", "0"), "--max-running"),
        ((), "--rate"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    simple: Rail, flags: tuple[str, ...], says: str
) -> None:
    before = simple.path.read_bytes()
    result = simple.cli("limit", "set", "coder", *flags)
    assert result.exit_code == 2, result.output
    assert says in result.stderr, result.stderr
    assert simple.path.read_bytes() == before


def test_queue_shows_a_role_held_back_by_its_limit(simple: Rail) -> None:
    for title in ("a", "b", "c"):
        assert simple.cli("task", "add", "-p", "simple", title).exit_code == 0
    simple.json("limit", "set", "coder", "--rate", "1/h")
    full = simple.cli("queue", "--no-legend")
    assert "rate-limited (fleet-wide): coder 1/h" in full.stdout
    assert "holding" not in full.stdout  # a token is left: nothing is held back yet

    async def claim_one(tracker: Tracker) -> None:
        assert await tracker.claim("agent-1", "coder", 60_000) is not None

    simple.run(claim_one)
    held = simple.cli("queue", "--no-legend")
    assert held.exit_code == 0
    assert "coder 1/h holding 2 ready back, next token" in " ".join(held.stdout.split())
