"""NullClaw's token usage as the executor reports it (docs/executors/nullclaw.md, "Cost"): read
from its stderr log lines when ``diagnostics.log_llm_io`` is on, else from its reply footer, and
reported with ``ctx.report_cost`` so the run's report carries it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plugins.api import Transition
from plugins.nullclaw.executor import NullClawExecutor
from plugins.nullclaw.usage import TokenCount

from .conftest import RecordingSink, make_ctx

pytestmark = pytest.mark.anyio


async def _run(tmp_path: Path, options: dict[str, Any], sink: RecordingSink) -> Any:
    ctx = make_ctx(tmp_path / "run", sink)
    outcome = await NullClawExecutor(options).execute(ctx)
    assert isinstance(outcome, Transition)
    return ctx._hooks.with_cost(outcome).usage  # as the worker sends it


async def test_logged_model_calls_are_summed(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_USAGE", "1200,300")
    opts = {**options, "config": {"diagnostics": {"log_llm_io": True}}}
    usage = await _run(tmp_path, opts, sink)
    assert usage["cost"] == {"usd": 0.0, "tokens": 3000}  # two calls of 1500


async def test_the_reply_footer_counts_when_nothing_is_logged(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_USAGE", "100,20")
    monkeypatch.setenv("FAKE_NULLCLAW_USAGE_FOOTER", "1")
    usage = await _run(tmp_path, options, sink)
    assert usage["cost"] == {"usd": 0.0, "tokens": 120}


async def test_no_usage_printed_reports_no_cost(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink
) -> None:
    usage = await _run(tmp_path, options, sink)
    assert "cost" not in usage


def test_lines_split_across_chunks_and_odd_lines() -> None:
    count = TokenCount()
    line = "info(agent): llm response session=0x1 iter=1 attempt=1 model=m bytes=3 tool_calls=0 "
    count.feed(line + 'usage={"prompt_tokens":7,')
    count.feed('"completion_tokens":5,"total_tokens":0} content="x"\n')  # total 0: 7 + 5
    count.feed('info(agent): llm response reasoning session=0x1 iter=1 content="usage={}"\n')
    count.feed('info(agent): llm response session=0x1 iter=2 usage={"total_tokens":"lots"}\n')
    count.feed('info(agent): llm response session=0x1 iter=3 usage={"total_tokens":30}')
    assert count.total("[usage] total_tokens=999") == 42  # the logged calls win
    assert TokenCount().total("answer\n\n[usage] total_tokens=17") == 17
    assert TokenCount().total("no footer here") == 0
