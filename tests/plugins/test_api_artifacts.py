"""Artifacts of files: ``ctx.artifact_file`` and the artifacts a command declares in outcome.json.

Real files, real child processes writing ``outcome.json``, and a real worker on an embedded
SQLite tracker.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import Failure, Transition
from plugins.artifact_files import default_artifacts_dir
from plugins.command.executor import CommandExecutor
from plugins.testing import ExecutorHarness
from tracker_client.errors import ExecutorError
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

from .helpers import PY

pytestmark = pytest.mark.anyio


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- ctx.artifact_file ---------------------------------------------------------------------------
class FileArtifact:
    """An executor recording one file through ``ctx.artifact_file`` with the given arguments."""

    def __init__(self, path: str | Path, content: bytes | None, **kwargs: Any) -> None:
        self.path, self.content, self.kwargs = path, content, kwargs
        self.artifact_id: str | None = None

    async def execute(self, ctx: Any) -> Transition:
        if self.content is not None:
            target = ctx.workdir / self.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.content)
        self.artifact_id = await ctx.artifact_file(self.path, **self.kwargs)
        return Transition()


async def test_artifact_file_hashes_and_sizes_a_workdir_file(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path)
    data = os.urandom(3 << 20) + b"tail"  # several chunks
    executor = FileArtifact("out/big.bin", data, meta={"media_type": "application/octet-stream"})
    assert await harness.run(executor) == Transition()
    (artifact,) = harness.artifacts
    assert executor.artifact_id == "artifact-1"
    assert artifact.kind == "file"
    assert artifact.uri == (tmp_path / "out" / "big.bin").resolve().as_uri()
    assert artifact.sha256 == sha(data)
    assert artifact.size_bytes == len(data)
    assert artifact.meta == {"media_type": "application/octet-stream"}
    assert (artifact.task_id, artifact.run_id) == (harness.task.id, harness.run_model.id)


async def test_artifact_file_copy_outlives_the_workdir(tmp_path: Path) -> None:
    harness = ExecutorHarness()  # a temporary workdir, removed after the run
    keep = tmp_path / "kept" / "nested" / "report.md"
    await harness.run(FileArtifact("report.md", b"# report\n", kind="report", copy_to=keep))
    (artifact,) = harness.artifacts
    assert harness.workdir is not None and not harness.workdir.exists()
    assert keep.read_bytes() == b"# report\n"
    assert artifact.uri == keep.as_uri()
    assert (artifact.kind, artifact.sha256, artifact.size_bytes) == (
        "report",
        sha(b"# report\n"),
        9,
    )
    assert stat.S_IMODE(keep.stat().st_mode) == 0o644 & ~_umask()  # the file's, not 0600
    assert [p.name for p in keep.parent.iterdir()] == ["report.md"]  # no temporary left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


async def test_artifact_file_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    harness = ExecutorHarness(workdir=tmp_path)
    with anyio.fail_after(10):  # a FIFO must be refused, not read forever
        with pytest.raises(ValueError, match="is not a regular file"):
            await harness.run(FileArtifact(fifo, None))
        with pytest.raises(IsADirectoryError):
            await harness.run(FileArtifact(tmp_path, None))
        with pytest.raises(FileNotFoundError):
            await harness.run(FileArtifact("absent.txt", None))
    assert harness.artifacts == []


# -- a command's outcome.json artifacts ----------------------------------------------------------
WRITER = r"""
import json, os, sys
workdir = os.environ["BACKLOG_WORKDIR"]
spec = json.loads(sys.argv[1])
for rel, text in spec.get("files", {}).items():
    path = os.path.join(workdir, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
for rel, target in spec.get("links", {}).items():
    os.symlink(target, os.path.join(workdir, rel))
with open(os.path.join(workdir, "outcome.json"), "w") as fh:
    json.dump(spec["outcome"], fh)
"""


def writer(tmp_path: Path, **options: Any) -> CommandExecutor:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    return CommandExecutor({"argv": [PY, str(script), "{task.metadata[spec]}"], **options})


def harness_for(spec: dict[str, Any], workdir: Path) -> ExecutorHarness:
    return ExecutorHarness(workdir=workdir, metadata={"spec": json.dumps(spec)})


async def test_command_declares_artifacts_in_its_outcome_file(tmp_path: Path) -> None:
    spec = {
        "files": {"out/report.md": "all good\n", "log.txt": "x" * 1000},
        "outcome": {
            "trigger": "approve",
            "artifacts": [
                {"path": "out/report.md", "kind": "report", "meta": {"lines": 1, "path": "no"}},
                {"path": "./out/../log.txt"},
            ],
        },
    }
    workdir = tmp_path / "run"
    harness = harness_for(spec, workdir)
    outcome = await harness.run(writer(tmp_path))
    assert outcome == Transition(trigger="approve")
    report, log = harness.artifacts
    assert report.kind == "report"
    # copied where it outlives the run's directory (the suite's data home, tests/conftest.py)
    kept = default_artifacts_dir()[0] / harness.task.id / harness.run_model.id / "out"
    assert report.uri == (kept / "report.md").as_uri()
    assert (kept / "report.md").read_text() == "all good\n"
    assert report.sha256 == sha(b"all good\n") and report.size_bytes == 9
    assert report.meta == {"lines": 1, "path": "out/report.md"}  # the real path wins
    assert (log.kind, log.meta, log.size_bytes) == ("file", {"path": "log.txt"}, 1000)
    assert log.run_id == harness.run_model.id


async def test_command_artifacts_are_copied_to_artifacts_dir(tmp_path: Path) -> None:
    spec = {"files": {"a/b.txt": "kept\n"}, "outcome": {"artifacts": [{"path": "a/b.txt"}]}}
    harness = harness_for(spec, tmp_path / "run")
    store = tmp_path / "store"
    assert await harness.run(writer(tmp_path, artifacts_dir=str(store))) == Transition()
    (artifact,) = harness.artifacts
    kept = store / harness.task.id / harness.run_model.id / "a" / "b.txt"
    assert kept.read_text() == "kept\n"
    assert artifact.uri == kept.as_uri()
    assert artifact.sha256 == sha(b"kept\n")


async def test_artifacts_dir_false_leaves_artifacts_in_the_run_directory(tmp_path: Path) -> None:
    spec = {"files": {"a.txt": "here\n"}, "outcome": {"artifacts": [{"path": "a.txt"}]}}
    harness = harness_for(spec, tmp_path / "run")
    assert await harness.run(writer(tmp_path, artifacts_dir=False)) == Transition()
    (artifact,) = harness.artifacts
    assert artifact.uri == (tmp_path / "run" / "a.txt").resolve().as_uri()


def test_the_default_artifacts_dir_outlives_runs_and_says_what_chose_it(tmp_path: Path) -> None:
    home = Path.home() / ".local" / "share" / "backlog-worker" / "artifacts"
    assert default_artifacts_dir({}) == (home, "~/.local/share")
    assert default_artifacts_dir({"XDG_DATA_HOME": "relative"}) == (home, "~/.local/share")
    assert default_artifacts_dir({"XDG_DATA_HOME": str(tmp_path)}) == (
        tmp_path / "backlog-worker" / "artifacts",
        "$XDG_DATA_HOME",
    )
    both = {"XDG_DATA_HOME": str(tmp_path), "STATE_DIRECTORY": "/var/lib/bw:/var/lib/other"}
    assert default_artifacts_dir(both) == (Path("/var/lib/bw/artifacts"), "$STATE_DIRECTORY")


@pytest.mark.parametrize(
    ("files", "links", "artifact", "problem"),
    [
        ({}, {}, {"path": "../outside.txt"}, "leads outside the run's working directory"),
        ({}, {}, {"path": "/etc/hostname"}, "must be relative to the run's working directory"),
        ({}, {"link.txt": "../outside.txt"}, {"path": "link.txt"}, "leads outside"),
        ({}, {}, {"path": "missing.txt"}, "no such file in the run's working directory"),
        ({"d/f": "x"}, {}, {"path": "d"}, "is not a regular file"),
        ({}, {}, {"kind": "file"}, "'path' must be a non-empty string"),
        ({}, {}, {"path": "f", "size": 1}, "unknown key(s) 'size'"),
        ({}, {}, {"path": "f", "meta": [1]}, "'meta' must be an object"),
    ],
)
async def test_bad_artifact_declarations_fail_naming_the_entry(
    tmp_path: Path, files: dict[str, str], links: dict[str, str], artifact: Any, problem: str
) -> None:
    (tmp_path / "outside.txt").write_text("not yours")
    spec = {
        "files": {"ok.txt": "fine", **files},
        "links": links,
        # a good entry first: nothing is recorded unless every entry is good
        "outcome": {"artifacts": [{"path": "ok.txt"}, artifact]},
    }
    harness = harness_for(spec, tmp_path / "run")
    outcome = await harness.run(writer(tmp_path))
    assert isinstance(outcome, Failure), outcome
    assert outcome.reason == "bad_executor_output" and not outcome.retryable
    assert problem in outcome.message
    assert "artifacts[1]" in outcome.message
    assert harness.artifacts == []


async def test_artifacts_must_be_a_list(tmp_path: Path) -> None:
    harness = harness_for({"outcome": {"artifacts": {"path": "x"}}}, tmp_path / "run")
    outcome = await harness.run(writer(tmp_path))
    assert isinstance(outcome, Failure)
    assert "'artifacts' must be a list of objects" in outcome.message


def test_artifacts_dir_option_is_checked() -> None:
    with pytest.raises(ExecutorError, match="'artifacts_dir' must be a non-empty path string"):
        CommandExecutor({"argv": [PY], "artifacts_dir": ""})


# -- in a real worker ----------------------------------------------------------------------------
@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


async def test_worker_records_command_artifacts_that_outlive_the_run(
    tracker: Tracker, tmp_path: Path
) -> None:
    pipeline = {
        "initial": "todo",
        "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
        "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
    }
    pipeline_id = await tracker.create_pipeline("flow", pipeline)
    spec = {
        "files": {"patch.diff": "+one line\n"},
        "outcome": {"artifacts": [{"path": "patch.diff", "kind": "patch"}]},
    }
    [task_id] = await tracker.create_tasks(
        [TaskCreate(pipeline_id=pipeline_id, title="t", metadata={"spec": json.dumps(spec)})]
    )
    options: dict[str, Any] = {
        "argv": [PY, str(tmp_path / "writer.py"), "{task.metadata[spec]}"],
        "artifacts_dir": str(tmp_path / "store"),
    }
    (tmp_path / "writer.py").write_text(WRITER)
    role = Role(
        config=RoleConfig(name="coder", executor="command", options=options),
        executor=CommandExecutor(options),
    )
    config = WorkerConfig(
        agent_id="w1",
        lease_ttl_s=5.0,
        idle_min_s=0.01,
        idle_max_s=0.1,
        report_flush_s=0.05,
        drain=True,
        workdir=tmp_path / "runs",
    )
    with anyio.fail_after(30):
        await Worker(tracker, config, [role]).run()
    assert (await tracker.get_task(task_id)).stage == "done"
    [run] = await tracker.list_runs(task_id)
    (artifact,) = (await tracker.list_artifacts(task_id=task_id)).items
    kept = tmp_path / "store" / task_id / run.id / "patch.diff"
    assert artifact.run_id == run.id
    assert (artifact.kind, artifact.uri, artifact.meta) == (
        "patch",
        kept.as_uri(),
        {"path": "patch.diff"},
    )
    assert artifact.sha256 == sha(b"+one line\n") and artifact.size_bytes == 10
    assert kept.read_text() == "+one line\n"
    assert not any((tmp_path / "runs").iterdir())  # the run's directory was removed
