"""``backlog-worker pipeline apply|diff -f FILE`` as an operator runs it: a real CLI subprocess
(exit codes, stdout, stderr) against an embedded rail file, a real ``tracker serve`` process on
127.0.0.1, a PostgreSQL schema, and a plain NullTickets imitation (which cannot, and says so).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cli.test_requeue_bulk import _asgi_of, _serving
from tests.pipelines.defs import renamed, v1
from tests.remote.fake_nulltickets import FakeNullTickets
from tests.remote.fixtures import wait_listening
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.timeout(120)


def _toml(definition: dict[str, Any], name: str = "review", moves: str = "") -> str:
    """A pipeline file as an operator writes it: name and moves, then [definition]."""
    lines = [f'name = "{name}"']
    if moves:
        lines.append(f"moves = {moves}")
    lines += ["", "[definition]", f'initial = "{definition["initial"]}"']
    for stage, state in definition["states"].items():
        lines.append(f"[definition.states.{stage}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in state.items()]
    for t in definition["transitions"]:
        lines.append("[[definition.transitions]]")
        lines += [f'{k} = "{t[k]}"' for k in ("from", "trigger", "to")]
    return "\n".join(lines) + "\n"


def _file(tmp_path: Path, text: str, name: str = "pipeline.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``backlog-worker ARGS`` in its own process (the operator's exit code and streams)."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("BACKLOG_WORKER_API_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _with_one_task_in_review(url: str) -> str:
    """A task of ``review`` moved to its stage ``review`` (as a worker would)."""

    async def seed() -> str:
        tracker = await open_tracker(url)
        try:
            pid = next(p.id for p in await tracker.list_pipelines() if p.name == "review")
            task = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
            lease = await tracker.claim("agent", "writer", 60_000)
            assert lease is not None and lease.task_id == task
            await tracker.transition(lease, "submit")
            return task
        finally:
            await tracker.aclose()

    return anyio.run(seed)


def _the_procedure(url: str, tmp_path: Path) -> None:
    """The page's procedure (docs/operate/pipelines.md) against the rail at ``url``."""
    first = _file(tmp_path, _toml(v1()), "v1.toml")
    created = cli("pipeline", "apply", "-f", first, "--tracker", url)
    assert created.returncode == 0, created.stderr
    assert (
        created.stdout.strip() == "pipeline review created (version 1): stages draft, review, done"
    )
    again = cli("pipeline", "apply", "-f", first, "--tracker", url)
    assert (again.returncode, again.stdout.strip()) == (0, "pipeline review unchanged (version 1)")

    _with_one_task_in_review(url)
    bare = _file(tmp_path, _toml(renamed()), "v2-no-moves.toml")
    for verb in ("diff", "apply"):
        refused = cli("pipeline", verb, "-f", bare, "--tracker", url)
        assert refused.returncode == 1, refused.stderr
        assert "stage 'review' holds 1 task(s) (1 unfinished, 0 running)" in refused.stderr
        assert 'moves = { review = "<new stage>" }' in refused.stderr

    second = _file(tmp_path, _toml(renamed(), moves='{ review = "check" }'), "v2.toml")
    diff = cli("pipeline", "diff", "-f", second, "--tracker", url)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.splitlines() == [
        "pipeline review would change: version 1 -> 2",
        "  + stage check",
        "  - stage review",
        "  + transition draft:submit:check",
        "  + transition check:approve:done",
        "  - transition draft:submit:review",
        "  - transition review:approve:done",
        "  move review -> check: 1 task(s) would move",
        "  tasks: 1 to bring to version 2, 0 running (finish under version 1, then land in 2)",
    ]
    as_json = json.loads(cli("pipeline", "diff", "-f", second, "--tracker", url, "--json").stdout)
    assert (as_json["tasks_moving"], as_json["applied"]) == ({"review": 1}, False)

    applied = cli("pipeline", "apply", "-f", second, "--tracker", url)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines()[0] == "pipeline review applied: version 1 -> 2"
    assert "  move review -> check: 1 task(s) moved" in applied.stdout.splitlines()
    again = cli("pipeline", "apply", "-f", second, "--tracker", url)
    assert (again.returncode, again.stdout.strip()) == (0, "pipeline review unchanged (version 2)")
    shown = json.loads(cli("pipeline", "show", "review", "--tracker", url, "--json").stdout)
    assert list(shown["definition"]["states"]) == ["draft", "check", "done"]


def test_the_procedure_on_an_embedded_rail(tmp_path: Path) -> None:
    _the_procedure(f"sqlite:///{tmp_path / 'rail.db'}", tmp_path)


def test_the_procedure_on_a_served_rail(tmp_path: Path) -> None:
    with _tracker_serve(tmp_path) as url:
        _the_procedure(url, tmp_path)


def test_the_procedure_on_a_postgresql_rail(tmp_path: Path) -> None:
    from tests.postgres.server import fresh_schema_url

    _the_procedure(fresh_schema_url(f"pipevo-cli-{uuid.uuid4()}"), tmp_path)


def test_a_plain_nulltickets_server_says_it_cannot(tmp_path: Path) -> None:
    fake = FakeNullTickets()

    async def make_app() -> tuple[Any, Callable[[], Awaitable[None]]]:
        async def close() -> None:
            return None

        return _asgi_of(fake), close

    path = _file(tmp_path, _toml(v1()))
    with _serving(make_app) as url:
        for verb in ("apply", "diff"):
            done = cli("pipeline", verb, "-f", path, "--tracker", url)
            assert done.returncode == 1, done.stderr
            assert "this rail does not support changing pipelines" in done.stderr
            assert "extension pipeline_versions" in done.stderr
    assert not any(r.url.path.startswith("/pipelines") for r in fake.requests)


@pytest.mark.parametrize(
    ("text", "args", "named"),
    [
        ('name = "review"\n[definition\n', [], "is not valid TOML"),
        (_toml(v1(), name="other"), ["review"], "is for pipeline 'other', not 'review'"),
        (
            _toml(v1()) + 'moves = { review = "check" }\n',
            [],
            "'moves' is inside the definition's transition #2; in TOML put the moves line",
        ),
        (_toml(renamed(), moves='"check"'), [], "'moves' must map old stage names to new ones"),
        (
            _toml(renamed(), moves='{ reveiw = "check" }'),
            [],
            "'moves': 'reveiw' is not a stage of pipeline 'review'",
        ),
        (
            _toml(renamed(), moves='{ review = "chek" }'),
            [],
            "'moves': review -> chek: 'chek' is not a stage of the new definition",
        ),
        (_toml({**v1(), "initial": "nowhere"}), [], "'initial' state 'nowhere' is not defined"),
        ('[definition]\ninitial = "a"\n', [], "has no 'name'"),
    ],
    ids=[
        "malformed",
        "other-pipeline",
        "moves-inside",
        "moves-not-a-table",
        "unknown-stage",
        "target-not-in-new",
        "bad-definition",
        "no-name",
    ],
)
def test_each_bad_file_is_named_exit_2_and_changes_nothing(
    tmp_path: Path, text: str, args: list[str], named: str
) -> None:
    url = f"sqlite:///{tmp_path / 'rail.db'}"
    assert (
        cli(
            "pipeline", "apply", "-f", _file(tmp_path, _toml(v1()), "v1.toml"), "--tracker", url
        ).returncode
        == 0
    )
    bad = _file(tmp_path, text)
    for verb in ("diff", "apply"):
        done = cli("pipeline", verb, *args, "-f", bad, "--tracker", url)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert named in done.stderr
    shown = json.loads(cli("pipeline", "show", "review", "--tracker", url, "--json").stdout)
    assert shown["definition"] == v1()


@contextmanager
def _tracker_serve(tmp_path: Path) -> Iterator[str]:
    """``backlog-worker tracker serve --create`` on 127.0.0.1 (port 0), its URL; ended by its
    pid (SIGTERM)."""
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "worker", "tracker", "serve", "--create", "--port", "0"]
    argv += ["--tracker", f"sqlite:///{tmp_path / 'served.db'}"]
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=fh)
    try:
        yield wait_listening(log, proc, 30)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "Traceback" not in log.read_text()
