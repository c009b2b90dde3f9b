"""Process handling: timeout, lease loss, shutdown, streaming, huge and non-UTF-8 output.

Every kill test checks by pid that nullclaw, its ``curl`` child and its shell-tool child are all
gone (the children ignore the parent's death, as the real ones do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import Failure, Outcome, Transition
from plugins.nullclaw.executor import NullClawExecutor
from tests.plugins.helpers import pid_alive, wait_dead

from .conftest import RecordingSink, make_ctx, wait_pidfile

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("children_ignore_term", [False, True])
async def test_timeout_kills_the_whole_group_and_fails_retryably(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
    children_ignore_term: bool,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    if children_ignore_term:
        monkeypatch.setenv("FAKE_NULLCLAW_CHILD_IGNORES_TERM", "1")
    opts = {**options, "timeout_s": 2.0, "kill_grace_s": 0.3}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))

    assert isinstance(outcome, Failure)
    assert outcome.reason == "timeout"
    assert outcome.retryable
    assert "process group was killed" in outcome.message
    assert "thinking" in outcome.details["stdout_tail"]
    pids = await wait_pidfile(pidfile, deadline_s=0.1)  # written long before the timeout
    assert set(pids) == {"nullclaw", "curl", "shell"}
    assert await wait_dead(list(pids.values())) == []


async def test_task_deadline_shorter_than_timeout_wins(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    ctx = make_ctx(tmp_path / "run", sink, deadline=anyio.current_time() + 2.0)
    outcome = await NullClawExecutor(options).execute(ctx)  # options say 30 s
    assert isinstance(outcome, Failure)
    assert outcome.reason == "timeout"
    assert outcome.details["timeout_s"] <= 2.0
    pids = await wait_pidfile(pidfile, deadline_s=0.1)
    assert await wait_dead(list(pids.values())) == []


async def _cancel_when_running(
    executor: NullClawExecutor, ctx: Any, pidfile: Path, before_cancel: Any = None
) -> tuple[dict[str, int], list[Outcome]]:
    """Run the executor, cancel its scope (as the worker does on lease loss) once all three
    processes are up; returns their pids and what execute() returned (nothing, if cancelled)."""
    done: list[Outcome] = []
    pids: dict[str, int] = {}
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def run() -> None:
            with scope:
                done.append(await executor.execute(ctx))

        tg.start_soon(run)
        pids.update(await wait_pidfile(pidfile))
        assert all(pid_alive(p) for p in pids.values())
        if before_cancel is not None:
            await before_cancel(pids)
        scope.cancel()
    return pids, done


@pytest.mark.parametrize("children_ignore_term", [False, True])
async def test_lease_loss_cancel_kills_the_group(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
    children_ignore_term: bool,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    if children_ignore_term:
        monkeypatch.setenv("FAKE_NULLCLAW_CHILD_IGNORES_TERM", "1")
    executor = NullClawExecutor({**options, "kill_grace_s": 0.3})
    ctx = make_ctx(tmp_path / "run", sink)
    pids, done = await _cancel_when_running(executor, ctx, pidfile)
    assert done == []  # cancelled, not a made-up outcome
    # run_process waits (shielded) for the group to vanish before the cancel propagates
    assert [p for p in pids.values() if pid_alive(p)] == []
    assert not sink.artifacts
    assert sink.items("result") == []


async def test_shutdown_keeps_running_until_cancelled_then_kills_the_group(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    shutdown = anyio.Event()
    ctx = make_ctx(tmp_path / "run", sink, shutdown=shutdown)
    executor = NullClawExecutor(options)

    async def drain_started(pids: dict[str, int]) -> None:
        shutdown.set()  # the worker starts draining: the run keeps its grace period
        assert ctx.shutting_down
        await anyio.sleep(0.2)  # a stretch of grace; nothing may be killed meanwhile
        assert all(pid_alive(p) for p in pids.values())

    pids, done = await _cancel_when_running(executor, ctx, pidfile, drain_started)
    assert done == []
    assert await wait_dead(list(pids.values()), deadline_s=5) == []


async def test_streaming_output_becomes_batched_progress_events(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = "streamed " * 40  # 360 chars -> 45 chunks of 8, 10 ms apart
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", answer.strip())
    monkeypatch.setenv("FAKE_NULLCLAW_DELAY", "0.01")
    opts = {**options, "provider_retries": 0, "progress_interval_s": 0.1}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    progress = [p for p in sink.items("progress") if p["stream"] == "stdout"]
    text = "".join(p["text"] for p in progress)
    assert text == "Sending to fakellm...\n" + answer.strip() + "\n"
    assert 1 <= len(progress) < 45  # batched, not one event per chunk
    stderr = "".join(p["text"] for p in sink.items("progress") if p["stream"] == "stderr")
    assert "info(memory)" in stderr
    assert len(sink.batches) < 45


async def test_huge_output_is_capped_and_progress_bounded(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "huge")
    monkeypatch.setenv("FAKE_NULLCLAW_SIZE", str(5_000_000))
    opts = {**options, "max_output_bytes": 1 << 20, "progress_max_bytes": 50_000}
    outcome = await NullClawExecutor(opts).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    [art] = sink.artifacts
    assert art.meta["truncated"] is True
    assert art.size_bytes is not None
    assert (1 << 20) - 100 < art.size_bytes < (1 << 20) + 200
    [result] = sink.items("result")
    assert result["output_truncated"] is True
    assert len(result["answer_head"]) == 4000
    progress = sink.items("progress")
    forwarded = sum(len(p.get("text", "")) for p in progress)
    assert forwarded <= 50_000
    assert any(p.get("dropped") for p in progress)
    assert len(progress) < 20


async def test_non_utf8_output_is_decoded_with_replacement(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "binary")
    outcome = await NullClawExecutor(options).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    [art] = sink.artifacts
    assert art.meta["decoding_errors"] is True
    text = Path(art.uri.removeprefix("file://")).read_text(encoding="utf-8")
    assert text.startswith("café ")
    assert "\ufffd" in text
    assert text.endswith(" end")
    assert any("\ufffd" in p["text"] for p in sink.items("progress") if p["stream"] == "stderr")


async def test_slow_answer_within_timeout_succeeds(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "slow")
    monkeypatch.setenv("FAKE_NULLCLAW_DELAY", "0.5")
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", "late but fine")
    outcome = await NullClawExecutor(options).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    assert sink.items("result")[0]["answer_head"] == "late but fine"


async def test_harness_cancel_on_first_progress_leaves_no_process(
    tmp_path: Path,
    options: dict[str, Any],
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the plugin authors' harness: cancel as soon as progress shows up."""
    from plugins.testing import ExecutorHarness

    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    harness = ExecutorHarness(title="hang", workdir=tmp_path / "run")

    def progress() -> list[dict[str, Any]]:
        return list(harness.events_of("progress"))

    async with anyio.create_task_group() as tg:

        async def cancel_when_all_started() -> None:
            # Progress shows up as soon as its first line is forwarded; "thinking" (the fake's
            # last output) may still sit in the forwarder's buffer then, and a cancelled run
            # does not flush it: wait until it was forwarded, not only until some progress was.
            with anyio.fail_after(30):
                while not any("thinking" in p.get("text", "") for p in progress()):
                    await harness.sink.wait_changed()
            await wait_pidfile(pidfile)
            harness.cancel()

        tg.start_soon(cancel_when_all_started)
        outcome = await harness.run(NullClawExecutor(options))
    assert harness.cancelled
    assert isinstance(outcome, Failure)
    assert outcome.reason == "cancelled"
    pids = await wait_pidfile(pidfile, deadline_s=0.1)
    assert [p for p in pids.values() if pid_alive(p)] == []
    assert any("thinking" in p.get("text", "") for p in progress())


async def test_harness_timeout_leaves_no_process(
    tmp_path: Path,
    options: dict[str, Any],
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's own deadline (the role's timeout_s) also kills the whole group."""
    from plugins.testing import ExecutorHarness

    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    harness = ExecutorHarness(title="hang", workdir=tmp_path / "run", timeout_s=2.0)
    outcome = await harness.run(NullClawExecutor(options))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "timeout"
    pids = await wait_pidfile(pidfile, deadline_s=0.1)
    assert await wait_dead(list(pids.values())) == []
