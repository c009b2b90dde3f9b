"""The nullclaw executor as an agent, with the fake nullclaw binary, in a real Worker on a real
embedded rail: memory (the store searched into the prompt, cited by key; the answer written
back) and resume (a cut-off attempt's partial answer and kept workspace in the next prompt).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.nullclaw.executor import NullClawExecutor
from plugins.nullclaw.memory import resume_text
from plugins.nullclaw.prompt import render_prompt
from tests.nullclaw.conftest import FAKE_SRC, read_record
from tracker_client.errors import ExecutorError
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PIPELINE = {
    "initial": "research",
    "states": {"research": {"agent_role": "researcher"}, "done": {"terminal": True}},
    "transitions": [{"from": "research", "to": "done", "trigger": "complete"}],
}

#: A ``nullclaw`` that is the fake, streaming slowly (so it is cut off by the role's timeout)
#: while ``slow-once`` exists in its directory, which it then removes: the retry is quick.
WRAPPER = f"""#!{sys.executable}
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
flag = os.path.join(here, "slow-once")
if sys.argv[1:2] == ["agent"] and os.path.exists(flag):
    os.remove(flag)
    os.environ["FAKE_NULLCLAW_DELAY"] = "0.5"
else:
    os.environ["FAKE_NULLCLAW_DELAY"] = "0.001"
os.execv(sys.executable, [sys.executable, os.path.join(here, "fake.py"), *sys.argv[1:]])
"""


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


@pytest.fixture
def binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "fake.py").write_text(FAKE_SRC.read_text())
    wrapper = bindir / "nullclaw"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    monkeypatch.setenv("FAKE_NULLCLAW_RECORD", str(tmp_path / "record.json"))
    return wrapper


def _options(binary: Path, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "binary": str(binary),
        "provider": "fakellm",
        "model": "fake-model",
        "base_url": "http://127.0.0.1:9/v1",
        "env_passthrough": ["FAKE_NULLCLAW_*"],
        "kill_grace_s": 0.5,
        "progress_interval_s": 0.05,
        "workspace": "task",
        "workspace_dir": str(tmp_path / "ws"),
        **extra,
    }


async def _drain(tracker: Tracker, tmp_path: Path, options: dict[str, Any]) -> None:
    role = Role(
        RoleConfig(name="researcher", executor="nullclaw", options=options),
        NullClawExecutor(options),
    )
    config = WorkerConfig(
        agent_id="w1",
        concurrency=1,
        lease_ttl_s=3.0,
        idle_min_s=0.01,
        idle_max_s=0.1,
        report_flush_s=0.05,
        workdir=tmp_path / "runs",
        drain=True,
    )
    with anyio.fail_after(60):
        await Worker(tracker, config, [role]).run()


async def test_memory_puts_store_hits_in_the_prompt_and_writes_the_answer_back(
    tracker: Tracker, tmp_path: Path, binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", "High water at 06:12 [tide-brest].")
    await tracker.store_put("notes", "tide-brest", "Brest tides: high water at 06:12")
    await tracker.store_put("notes", "tide-oslo", {"text": "Oslo tides are small"})
    await tracker.store_put("notes", "cats", "cats sleep a lot")
    await tracker.store_put("other", "tide-elsewhere", "a tide note in another namespace")
    pid = await tracker.create_pipeline("research", PIPELINE)
    task_id = await tracker.create_task(
        TaskCreate(pipeline_id=pid, title="Tide times", description="for Brest tomorrow")
    )
    memory = {"namespace": "notes", "top_k": 2, "max_chars": 400, "write_key": "answer-$task_id"}
    await _drain(tracker, tmp_path, _options(binary, tmp_path, memory=memory))
    assert (await tracker.get_task(task_id)).stage == "done"
    prompt = read_record(tmp_path / "record.json")["prompt"]
    assert "Notes from memory (namespace 'notes'; cite them by [key]):" in prompt
    # "tide" and "brest" both match tide-brest: it ranks first
    assert prompt.index("[tide-brest] Brest tides") < prompt.index("[tide-oslo]")
    assert "cats" not in prompt and "another namespace" not in prompt
    entry = await tracker.store_get("notes", f"answer-{task_id}")
    assert entry.value["answer"] == "High water at 06:12 [tide-brest]."


async def test_a_cut_off_attempt_resumes_with_its_partial_answer_and_workspace(
    tracker: Tracker, tmp_path: Path, binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = "PART-ONE " * 20 + "the end"
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", answer)
    (binary.parent / "slow-once").write_text("")
    pid = await tracker.create_pipeline("research", PIPELINE)
    task_id = await tracker.create_task(
        TaskCreate(
            pipeline_id=pid,
            title="Long report",
            retry_policy=RetryPolicy(max_attempts=2, retry_delay_ms=50),
        )
    )
    # provider_retries = 0: the fake streams its answer 8 characters at a time
    options = _options(binary, tmp_path, timeout_s=1.5, provider_retries=0)
    await _drain(tracker, tmp_path, options)
    runs = await tracker.list_runs(task_id)
    assert [r.status for r in runs] == ["failed", "completed"]
    assert "timeout" in (runs[0].error or "")
    prompt = read_record(tmp_path / "record.json")["prompt"]
    assert "An earlier attempt (1) at this task was interrupted." in prompt
    assert f"Its files are still in your workspace: {tmp_path / 'ws'}" in prompt
    partial = prompt.split("Its partial answer:\n", 1)[1]
    assert partial.startswith("PART-ONE") and "the end" not in partial
    assert "Sending to" not in partial


def test_memory_and_resume_blocks_go_before_the_verdict_line() -> None:
    text = render_prompt(
        None,
        title="t",
        description="d",
        metadata={},
        instructions=None,
        task_id="1",
        run_id="r",
        attempt=2,
        stage="review",
        pipeline_id="p",
        workspace=Path("/ws"),
        triggers={"APPROVE": "approve"},
        memory="Notes from memory: [k] v",
        resume=resume_text({"partial_answer": "half", "attempt": 1, "workspace": None}),
    )
    assert text.index("[k] v") < text.index("half") < text.index("APPROVE")
    assert text.rstrip().endswith(text.rstrip().splitlines()[-1])
    assert "one of these words: APPROVE" in text.splitlines()[-1]


@pytest.mark.parametrize(
    ("memory", "words"),
    [
        ({"top_k": 3}, ["memory", "namespace"]),
        ({"namespace": "n", "top_k": 0}, ["top_k"]),
        ({"namespace": "n", "colour": "x"}, ["colour"]),
    ],
)
def test_bad_memory_options_are_named(tmp_path: Path, memory: Any, words: list[str]) -> None:
    with pytest.raises(ExecutorError) as caught:
        NullClawExecutor(_options(tmp_path / "nullclaw", tmp_path, memory=memory))
    for word in words:
        assert word in str(caught.value)
