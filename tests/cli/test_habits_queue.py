"""``queue``: a healthy lease is not "expiring", and the legend defines every column.

A worker heartbeats every third of its lease TTL, so a lease with less than a third of its own
TTL left has missed a heartbeat; the old fixed 60 s window equalled the default TTL and counted
every healthy lease.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cli.conftest import SIMPLE, Rail, invoke
from tests.cli.test_remote import TOKEN, served  # noqa: F401  (the served-rail fixture)
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker


def _coder(rail: Rail, *flags: str) -> dict[str, object]:
    stats = rail.json("queue", *flags)
    return next(r for r in stats["roles"] if r["role"] == "coder")


def test_healthy_leases_are_not_expiring_a_missed_heartbeat_is(simple: Rail) -> None:
    for i in range(2):
        simple.add(f"t{i}")

    async def claim(tracker: Tracker) -> None:
        healthy = await tracker.claim("w1", "coder", 60_000)  # the default TTL, just claimed
        late = await tracker.claim("w2", "coder", 60_000)
        assert healthy is not None and late is not None
        # The late lease has 10 s of its 60 s TTL left: what a lease looks like two heartbeats
        # (20 s each) after its worker went quiet.
        await tracker.heartbeat(late, lease_ttl_ms=10_000)

    simple.run(claim)
    coder = _coder(simple)
    assert coder["running_count"] == 2
    assert coder["near_expiry_leases"] == 1
    # An explicit window still counts every lease ending within it.
    assert _coder(simple, "--near-expiry", "2m")["near_expiry_leases"] == 2
    assert _coder(simple, "--near-expiry", "5s")["near_expiry_leases"] == 0
    table = simple.cli("queue")
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if line.strip().startswith("coder"))
    # role waiting ready running failed dead oldest expiring stuck cap
    assert row.split()[3] == "2" and row.split()[7] == "1", row


def test_the_legend_defines_every_column(simple: Rail) -> None:
    from worker.cli.ops.queue import LEGEND

    result = simple.cli("queue")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["role", "waiting"])
    columns = header.split()
    assert len(columns) == 10
    defined = [line.split(":")[0].strip() for line in lines if ":" in line]
    for column in columns:
        assert column in defined, f"the legend does not define {column!r}"
    assert [entry.split(":")[0] for entry in LEGEND] == columns
    assert all(len(line) <= 80 for line in LEGEND)
    assert "stuck: runs started over 5m00s ago and still running" in result.stdout
    windowed = simple.cli("queue", "--near-expiry", "30s", "--stuck", "1m")
    assert "expiring: live leases ending within 30.0s" in windowed.stdout
    assert "stuck: runs started over 1m00s ago" in windowed.stdout
    quiet = simple.cli("queue", "--no-legend")
    assert quiet.exit_code == 0
    assert LEGEND[0] not in quiet.stdout


def test_a_served_rail_gets_a_third_of_the_default_ttl(
    served: str,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over HTTP the API takes one window: the CLI asks for 20 s, so a fresh lease of the
    default 60 s TTL is not expiring (the old 60 s window counted it)."""
    url = served
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", TOKEN)
    definition = tmp_path / "simple.json"
    definition.write_text(json.dumps({"name": "simple", "definition": SIMPLE}))
    assert invoke(["pipeline", "create", "-f", str(definition), "--tracker", url]).exit_code == 0
    assert invoke(["task", "add", "-p", "simple", "t", "--tracker", url]).exit_code == 0

    async def claim() -> None:
        tracker = await open_tracker(url, api_token=TOKEN)
        try:
            assert await tracker.claim("w1", "coder", 60_000) is not None
        finally:
            await tracker.aclose()

    anyio.run(claim)

    def coder(*flags: str) -> Any:
        result = invoke(["queue", "--json", "--tracker", url, *flags])
        assert result.exit_code == 0, result.output
        return next(r for r in json.loads(result.stdout)["roles"] if r["role"] == "coder")

    assert coder()["near_expiry_leases"] == 0
    assert coder("--near-expiry", "2m")["near_expiry_leases"] == 1
