"""``task list``: filters by state and role, sorts by priority then creation, and refuses an
unknown stage or role by naming the known ones. Through the real CLI on a real SQLite rail."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import Rail
from tracker_client.protocol import Tracker


def _claim_and(rail: Rail, action: str) -> None:
    async def go(tracker: Tracker) -> None:
        lease = await tracker.claim("w1", "coder", 60_000)
        assert lease is not None
        if action == "complete" or action == "verify":
            await tracker.transition(lease, action)
        elif action == "fail":
            await tracker.fail(lease, "boom")
        # "hold": the lease stays live (running)

    rail.run(go)


def _seed(rail: Rail) -> dict[str, str]:
    ids: dict[str, str] = {}
    ids["done-me"] = rail.add("done-me")
    _claim_and(rail, "complete")
    ids["to-check"] = rail.add("to-check")
    _claim_and(rail, "verify")
    ids["failing"] = rail.add("failing", "--retry-delay", "1h")
    _claim_and(rail, "fail")
    ids["running"] = rail.add("running")
    _claim_and(rail, "hold")
    ids["cancelled"] = rail.add("cancelled")
    assert rail.cli("task", "cancel", ids["cancelled"]).exit_code == 0
    for title, prio in (("low", "-1"), ("high", "9"), ("mid", "5"), ("mid2", "5")):
        ids[title] = rail.add(title, "--priority", prio)
    return ids


def _titles(rail: Rail, *flags: str) -> list[str]:
    listed: dict[str, Any] = rail.json("task", "list", *flags)
    return [t["title"] for t in listed["items"]]


def test_states_roles_and_priority_order(simple: Rail) -> None:
    _seed(simple)
    everything = ["high", "mid", "mid2", "done-me", "to-check", "failing", "running"]
    assert _titles(simple) == [*everything, "cancelled", "low"]
    assert _titles(simple, "--state", "waiting") == ["high", "mid", "mid2", "to-check", "low"]
    assert _titles(simple, "--state", "running") == ["running"]
    assert _titles(simple, "--state", "failed") == ["failing"]
    assert _titles(simple, "--state", "dead") == ["cancelled"]
    assert _titles(simple, "--state", "done") == ["done-me"]
    assert _titles(simple, "--state", "running", "--state", "failed") == ["failing", "running"]
    assert _titles(simple, "--role", "checker") == ["to-check"]
    coder_waiting = _titles(simple, "--role", "coder", "--state", "waiting")
    assert coder_waiting == ["high", "mid", "mid2", "low"]
    created = _titles(simple, "--sort", "created")
    assert created[:3] == ["done-me", "to-check", "failing"] and created[-1] == "mid2"

    listed = simple.json("task", "list", "--state", "failed")
    [item] = listed["items"]
    assert (item["state"], item["role"], listed["total"]) == ("failed", "coder", 1)

    table = simple.cli("task", "list", "--limit", "3")
    assert table.exit_code == 0, table.output
    assert "tasks (3 of 9)" in table.stdout
    assert "6 more: --cursor " in table.stdout
    row = next(line for line in table.stdout.splitlines() if " high " in line)
    assert "coder" in row and "waiting" in row
    failing = simple.cli("task", "list", "--state", "failed")
    assert "failed (attempt 1), retry at" in failing.stdout
    running = simple.cli("task", "list", "--state", "running")
    assert "running (attempt 1, w1)" in running.stdout


def test_unknown_stage_or_role_names_the_known_ones(simple: Rail) -> None:
    simple.add("t")
    result = simple.cli("task", "list", "-p", "simple", "--stage", "limbo")
    assert result.exit_code == 2
    assert "unknown stage 'limbo' in pipeline simple (known: check, dead, done, todo)" in (
        result.stderr
    )
    result = simple.cli("task", "list", "--role", "painter")
    assert result.exit_code == 2
    assert "unknown role 'painter' (known: checker, coder)" in result.stderr
    result = simple.cli("task", "list", "--state", "sleeping")
    assert result.exit_code == 2
    assert "waiting" in result.stderr  # click names the choices
    assert _titles(simple, "--stage", "todo") == ["t"]


def test_cursor_pages_in_priority_order_without_repeats(simple: Rail) -> None:
    for prio in (1, 3, 2, 3, 1):
        simple.add(f"p{prio}", "--priority", str(prio))
    first = simple.json("task", "list", "--limit", "2")
    assert [t["priority"] for t in first["items"]] == [3, 3]
    simple.add("late", "--priority", "9")  # sorts before the cursor: not repeated, not skipped
    rest = simple.json("task", "list", "--limit", "10", "--cursor", first["next_cursor"])
    assert [t["priority"] for t in rest["items"]] == [2, 1, 1]
    assert rest["next_cursor"] is None
    bad = simple.cli("task", "list", "--sort", "created", "--cursor", first["next_cursor"])
    assert bad.exit_code == 2
    assert "not a cursor printed by task list --sort created" in bad.stderr
