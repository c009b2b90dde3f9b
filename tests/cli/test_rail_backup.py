"""``rail backup``, ``rail verify`` and ``rail restore`` on real embedded rail files.

A second process writes to the rail while it is backed up (a real SQLite file shared by two
processes, as workers share it); invariants are broken by hand with ``sqlite3`` to show that
verify names each one; a restore is refused while the rail's registry shows a worker alive,
and afterwards the task a lease held in the backup is reclaimed, not lost.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.conftest import Rail, invoke
from tracker_client.embedded.backup import verify_file
from tracker_client.embedded.migrate import APPLICATION_ID
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.timeout(120)

#: A second process that keeps writing to the rail (create, claim, event, transition) until
#: its stdin closes; it prints one line per round, so the test waits on output, never on time.
WRITER = textwrap.dedent(
    """
    import sys, anyio
    from tracker_client.factory import open_tracker
    from tracker_client.models import TaskCreate

    async def main():
        t = await open_tracker(sys.argv[1])
        pid = (await t.list_pipelines())[0].id
        n = 0
        while True:
            n += 1
            await t.create_task(TaskCreate(pipeline_id=pid, title=f"w{n}"))
            lease = await t.claim("writer", "coder", 60_000)
            await t.add_event(lease, "progress", {"n": n})
            if n % 2:
                await t.transition(lease, "complete")
            print(n, flush=True)
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
        await t.aclose()

    anyio.run(main)
    """
)


def _writer(rail: Rail) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, rail.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _step(proc: subprocess.Popen[str], rounds: int = 1) -> None:
    """Let the writer do ``rounds`` more rounds and wait for each to be committed."""
    assert proc.stdin is not None and proc.stdout is not None
    for _ in range(rounds):
        assert proc.stdout.readline().strip(), "the writer stopped"
        proc.stdin.write("go\n")
        proc.stdin.flush()


def test_a_backup_taken_while_another_process_writes_is_whole_and_verified(
    simple: Rail, tmp_path: Path
) -> None:
    writer = _writer(simple)
    backups = tmp_path / "backups"
    backups.mkdir()
    made: list[Path] = []
    try:
        for round_ in range(3):
            _step(writer, 3)
            dest = backups / f"b{round_}.db"
            # the writer goes on writing while the backup runs: one more round in flight
            assert writer.stdin is not None
            writer.stdin.write("go\n")
            writer.stdin.flush()
            result = simple.cli("rail", "backup", str(dest))
            assert result.exit_code == 0, result.output
            assert f"-> {dest}" in result.stdout
            assert "verified: integrity and every invariant hold" in result.stdout
            made.append(dest)
            assert writer.stdout is not None
            writer.stdout.readline()
    finally:
        assert writer.stdin is not None
        writer.stdin.close()
        writer.wait(timeout=30)
        assert writer.stdout is not None
        writer.stdout.close()
    assert writer.returncode == 0
    sizes = []
    for dest in made:
        assert dest.stat().st_mode & 0o777 == 0o600
        assert not dest.with_name(dest.name + "-wal").exists()
        report = verify_file(dest)
        assert report.ok, report.problems
        sizes.append(report.counts["tasks"])
        with sqlite3.connect(dest) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
            assert conn.execute("SELECT count(*) FROM rail_secrets").fetchone()[0] == 0
    assert sizes == sorted(sizes) and sizes[0] >= 3  # each backup a later moment of the rail


def test_a_backup_into_a_directory_gets_a_dated_name(simple: Rail, tmp_path: Path) -> None:
    result = simple.cli("rail", "backup", str(tmp_path))
    assert result.exit_code == 0, result.output
    (made,) = tmp_path.glob("rail-*Z.db")
    assert made.name[len("rail-") : -len("Z.db")].replace("T", "").isdigit()
    assert verify_file(made).ok


def test_a_backup_never_overwrites_unless_forced(simple: Rail, tmp_path: Path) -> None:
    dest = tmp_path / "b.db"
    dest.write_text("precious")
    result = simple.cli("rail", "backup", str(dest))
    assert result.exit_code == 2
    assert f"{dest}: exists already (pass --force to replace it)" in result.stderr
    assert dest.read_text() == "precious"
    result = simple.cli("rail", "backup", str(dest), "--force")
    assert result.exit_code == 0, result.output
    assert verify_file(dest).ok


@pytest.mark.parametrize(
    ("dest", "message"),
    [
        ("rail.db", "is the rail itself; back it up somewhere else"),
        ("nowhere/b.db", "no such directory for the backup"),
    ],
)
def test_a_backup_to_a_bad_destination_is_refused(
    simple: Rail, tmp_path: Path, dest: str, message: str
) -> None:
    before = simple.path.read_bytes()
    result = simple.cli("rail", "backup", str(tmp_path / dest), "--force")
    assert result.exit_code == 2
    assert message in result.stderr
    assert simple.path.read_bytes() == before
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://backlog@127.0.0.1:1/db", "back it up with pg_dump"),
        ("http://127.0.0.1:1", "run `rail backup` on the host of the served rail"),
        ("sqlite:///:memory:", "an in-memory rail has no file to backup"),
    ],
)
def test_backing_up_another_kind_of_rail_says_how(tmp_path: Path, url: str, message: str) -> None:
    result = invoke(["rail", "backup", str(tmp_path / "b.db"), "--tracker", url])
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / "b.db").exists()


def _break(path: Path, *statements: str) -> None:
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)


def test_verify_names_each_broken_invariant(simple: Rail) -> None:
    simple.add("a")
    simple.add("b")

    async def lease(tracker: Tracker) -> None:
        assert await tracker.claim("w", "coder", 60_000) is not None

    simple.run(lease)
    ok = simple.cli("rail", "verify")
    assert ok.exit_code == 0, ok.output
    assert "2 tasks, 1 leased tasks, 1 runs" in ok.stdout
    _break(
        simple.path,
        "UPDATE runs SET status = 'completed'",  # the lease's run no longer running
        "INSERT INTO events (task_id, run_id, ts_ms, kind, data) "
        "VALUES ('gone', NULL, 1, 'x', '{}')",
        "UPDATE tasks SET task_version = 0 WHERE title = 'b'",
        "INSERT INTO dependencies (task_id, depends_on_task_id, created_at_ms) "
        "SELECT id, 'missing', 1 FROM tasks WHERE title = 'b'",
    )
    bad = simple.cli("rail", "verify")
    assert bad.exit_code == 1
    problems = [line for line in bad.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 4, bad.stdout
    assert "holds a lease whose run is missing or not running" in problems[0]
    assert "is an event of a task that does not exist: " in bad.stdout
    assert "has a task version below 1" in bad.stdout
    assert "depends on missing" in bad.stdout
    report = json.loads(simple.cli("rail", "verify", str(simple.path), "--json").stdout)
    assert report["ok"] is False and len(report["problems"]) == 4


def test_verify_finds_an_orphan_run_and_an_attempt_ahead(simple: Rail) -> None:
    simple.add("a")

    async def lease(tracker: Tracker) -> None:
        assert await tracker.claim("w", "coder", 60_000) is not None

    simple.run(lease)
    _break(
        simple.path,
        "UPDATE tasks SET lease_expires_at_ms = 0, lease_run_id = NULL, last_attempt = 0",
    )
    result = simple.cli("rail", "verify")
    assert result.exit_code == 1
    assert "marked running that is not the run its task's lease names" in result.stdout
    assert "is attempt 1, last attempt 0" in result.stdout


def test_verify_refuses_what_is_no_rail(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    other = tmp_path / "other.db"
    _break(other, "CREATE TABLE t (x)")
    newer = tmp_path / "newer.db"
    _break(newer, f"PRAGMA application_id = {APPLICATION_ID}", "PRAGMA user_version = 999")
    for path, message in [
        (text, "not a SQLite database"),
        (other, "not a backlog-worker rail"),
        (newer, "written by a newer backlog-worker (schema version 999"),
        (tmp_path / "missing.db", "no such rail file"),
    ]:
        result = invoke(["rail", "verify", str(path)])
        assert result.exit_code == 2, (path, result.output)
        assert message in result.stderr


def test_verify_reports_a_damaged_file(simple: Rail, tmp_path: Path) -> None:
    for n in range(40):
        simple.add(f"task {n} " + "x" * 200)
    dest = tmp_path / "b.db"
    assert simple.cli("rail", "backup", str(dest)).exit_code == 0
    data = bytearray(dest.read_bytes())
    page = 4096
    data[3 * page : 5 * page] = b"\xa5" * (2 * page)  # two pages of garbage mid-file
    dest.write_bytes(bytes(data))
    result = invoke(["rail", "verify", str(dest)])
    assert result.exit_code == 1, result.output
    assert "problem: " in result.stdout


def _register(rail: Rail, *, stopping: bool) -> None:
    async def go(tracker: Tracker) -> None:
        await tracker.call(
            "register_worker",
            "w-1",
            host="host-a",
            pid=4242,
            version="test",
            roles=["coder"],
            slots=1,
            agent_id="w",
            started_at_ms=1,
            lost_after_ms=3_600_000,
            stopping=stopping,
        )

    rail.run(go)


def test_restore_waits_for_the_workers_then_brings_back_every_task(
    simple: Rail, tmp_path: Path
) -> None:
    ids = [simple.add(f"t{n}") for n in range(3)]

    async def lease(tracker: Tracker) -> str:
        held = await tracker.claim("w", "coder", 3_600_000)
        assert held is not None
        return held.task.id

    leased = simple.run(lease)
    dest = tmp_path / "b.db"
    assert simple.cli("rail", "backup", str(dest)).exit_code == 0
    simple.add("after the backup")
    _register(simple, stopping=False)
    before = simple.path.read_bytes()

    refused = simple.cli("rail", "restore", str(dest))
    assert refused.exit_code == 1
    assert "1 worker(s) still alive on this rail (host-a:4242 (w-1))" in refused.stderr
    assert simple.path.read_bytes() == before

    _register(simple, stopping=True)
    done = simple.cli("rail", "restore", str(dest))
    assert done.exit_code == 0, done.output
    assert "1 lease(s) live in the backup came back expired" in done.stdout
    (aside,) = tmp_path.glob("rail.db.before-restore-*Z")
    assert aside.name in done.stdout
    assert simple.path.stat().st_mode & 0o777 == 0o600

    async def after(tracker: Tracker) -> tuple[list[str], str | None, int | None]:
        titles = [t.title for t in (await tracker.list_tasks(limit=100)).items]
        again = await tracker.claim("w2", "coder", 60_000)
        return titles, again.task.id if again else None, again.run.attempt if again else None

    titles, first, attempt = simple.run(after)
    assert sorted(titles) == ["t0", "t1", "t2"]  # the rail as backed up, the later task not
    assert (first, attempt) == (leased, 2)  # the lease came back expired: reclaimed first
    assert set(ids) >= {leased}
    assert verify_file(simple.path).ok


def test_restore_refuses_a_backup_that_does_not_verify(simple: Rail, tmp_path: Path) -> None:
    simple.add("a")
    dest = tmp_path / "b.db"
    assert simple.cli("rail", "backup", str(dest)).exit_code == 0
    _break(dest, "UPDATE tasks SET task_version = 0")
    before = simple.path.read_bytes()
    result = simple.cli("rail", "restore", str(dest))
    assert result.exit_code == 2
    assert "refusing to restore a backup that does not verify" in result.stderr
    assert "task version below 1" in result.stderr
    assert simple.path.read_bytes() == before
    assert not list(tmp_path.glob("*.before-restore-*"))


PAGE = Path(__file__).resolve().parents[2] / "docs" / "operate" / "backups-retention.md"


def _shape(line: str) -> str:
    """A line with paths, figures and stamps made generic, to compare the page with a run."""
    line = re.sub(r"/\S+?(?=[ )]|$)", "PATH", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)


def test_the_pages_walkthrough_runs_as_shown(simple: Rail, tmp_path: Path) -> None:
    """docs/operate/backups-retention.md: each `backlog-worker rail ...` line of the embedded
    rail's blocks, run on a real rail, prints lines of the shape the page shows."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("### An embedded rail") : text.index("### A PostgreSQL rail")]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 3
    simple.add("a")
    backups = tmp_path / "backups"
    backups.mkdir()
    ran = 0
    for block in blocks:
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("backlog-worker rail "):
                continue
            args = line.split()[1:]
            if args[1] in ("verify", "restore"):
                (made,) = backups.glob("rail-*.db")
                args[2] = str(made)
            else:
                args[2] = str(backups)
            if args[1] == "restore":
                # the page's walkthrough stops the workers first; here the rail has none
                assert lines[i - 1].startswith("sudo systemctl stop")
            result = simple.cli(*args)
            assert result.exit_code == 0, result.output
            shown = [c[2:] for c in lines[i + 1 :] if c.startswith("# ")]
            shown = shown[: len(result.stdout.splitlines())]
            assert [_shape(s) for s in shown] == [_shape(o) for o in result.stdout.splitlines()], (
                line
            )
            ran += 1
    assert ran == 3
