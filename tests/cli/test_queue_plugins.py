"""``backlog-worker queue [--watch]`` and ``backlog-worker plugins``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Rail, invoke
from tracker_client.protocol import Tracker


def test_queue_table_and_json(simple: Rail) -> None:
    for i in range(3):
        simple.add(f"t{i}")

    async def claim(tracker: Tracker) -> None:
        assert await tracker.claim("w1", "coder", 30_000) is not None

    simple.run(claim)
    stats = simple.json("queue", "--near-expiry", "60s")
    coder = next(r for r in stats["roles"] if r["role"] == "coder")
    assert coder["waiting_count"] == 2
    assert coder["running_count"] == 1
    assert coder["near_expiry_leases"] == 1  # 30 s lease, an explicit 60 s near-expiry window
    assert {r["role"] for r in stats["roles"]} == {"coder", "checker"}

    table = simple.cli("queue")
    assert table.exit_code == 0, table.output
    for word in ("coder", "checker", "waiting", "running", "dead", "expiring", "stuck"):
        assert word in table.stdout
    assert "tasks by stage: todo 3; active leases: 1" in table.stdout


def test_queue_without_pipelines(rail: Rail) -> None:
    result = rail.cli("queue")
    assert result.exit_code == 0
    assert "no roles yet" in result.stdout


def test_queue_watch_json_lines(simple: Rail) -> None:
    simple.add("t")
    result = simple.cli("queue", "--watch", "--iterations", "3", "--interval", "10ms", "--json")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3
    assert all(json.loads(line)["roles"] for line in lines)


def test_queue_watch_plain(simple: Rail) -> None:
    result = simple.cli("queue", "--watch", "--iterations", "2", "--interval", "10ms")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("coder") == 2


def test_queue_bad_interval(simple: Rail) -> None:
    result = simple.cli("queue", "--watch", "--interval", "often")
    assert result.exit_code == 2
    assert "not a duration" in result.stderr


def test_plugins_lists_builtin_executors() -> None:
    result = invoke(["plugins", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["executor"]: r for r in json.loads(result.stdout)}
    assert {"command", "python", "nullclaw"} <= set(rows)
    assert rows["command"]["state"] == "needs options"
    table = invoke(["plugins"])
    assert table.exit_code == 0
    assert "command" in table.stdout


def test_plugins_checks_configured_roles(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        '[[roles]]\nname = "coder"\nexecutor = "command"\n[roles.options]\nargv = ["/bin/true"]\n'
    )
    result = invoke(["plugins", "--config", str(good), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows[0] == {
        "executor": "command",
        "source": "plugins.command:CommandExecutor",
        "role": "coder",
        "state": "ready",
        "problems": [],
    }

    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[roles]]\nname = "coder"\nexecutor = "command"\n[roles.options]\nargv = "nope"\n'
        '[[roles]]\nname = "ghost"\nexecutor = "no-such-plugin"\n'
    )
    result = invoke(["plugins", "--config", str(bad)])
    assert result.exit_code == 1
    assert "bad options" in result.stdout
    assert "not loadable" in result.stdout
    assert "no-such-plugin" in result.stdout


def test_plugins_bad_config_file(tmp_path: Path) -> None:
    result = invoke(["plugins", "--config", str(tmp_path / "absent.toml")])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_queue_watch_live_view_on_a_terminal(simple: Rail, monkeypatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich treats stdout as a terminal: a Live view
    simple.add("t")
    result = simple.cli("queue", "--watch", "--iterations", "2", "--interval", "10ms")
    assert result.exit_code == 0, result.output
    assert "coder" in result.stdout
