"""The NullClaw page's example (docs/executors/nullclaw.md) stays valid: config loads, roles
build."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from plugins.nullclaw.executor import NullClawExecutor
from tests.docs.blocks import ROOT, blocks
from tracker_client.factory import open_tracker
from worker.config.models import load_config

PAGE = "docs/executors/nullclaw.md"


def _toml_blocks() -> list[str]:
    return [b.body for b in blocks(PAGE) if b.lang == "toml"]


@pytest.mark.anyio
async def test_pipeline_example_is_accepted_by_the_embedded_tracker(tmp_path: Path) -> None:
    pipeline = tomllib.loads(_toml_blocks()[0])
    async with await open_tracker(f"sqlite:///{tmp_path / 'rail.db'}") as tracker:
        pipeline_id = await tracker.create_pipeline(pipeline["name"], pipeline["definition"])
        [stored] = [p for p in await tracker.list_pipelines() if p.id == pipeline_id]
    assert stored.name == "code-review"
    roles = {s.get("agent_role") for s in pipeline["definition"]["states"].values()} - {None}
    assert roles == {"coder", "reviewer"}


def test_worker_config_example_loads_and_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "nullclaw-worker.toml"
    path.write_text(_toml_blocks()[1])
    for name in list(os.environ):
        if name.startswith("BACKLOG_WORKER_"):
            monkeypatch.delenv(name)
    config = load_config(path)
    roles = {r.name: r for r in config.roles}
    assert set(roles) == {"coder", "reviewer"}
    coder = NullClawExecutor(roles["coder"].options)
    assert coder.options.workspace == "task"
    assert coder.options.config["autonomy"]["level"] == "full"
    reviewer = NullClawExecutor(roles["reviewer"].options)
    assert reviewer.options.triggers == {"APPROVE": "approve", "REJECT": "reject"}
    assert "$verdict_instructions" in (reviewer._template or "")


def test_every_option_is_documented_on_the_page() -> None:
    from plugins.nullclaw.options import NullClawOptions

    section = (ROOT / PAGE).read_text(encoding="utf-8")
    missing = [
        name
        for name in NullClawOptions.model_fields
        if f"`{name}" not in section and f"{name} =" not in section
    ]
    assert missing == []
