"""The configuration fragments on the docs' pages load: each TOML block marked as tested here is
written as a worker's config file (with one role added when it names none) and read by the
worker's own loader, so a renamed or mistyped key on a page fails here as it would at start."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from tests.docs.blocks import Block, blocks, doc_pages
from worker.config.models import load_config

ME = "tests/docs/test_config_blocks.py"
ROLE = '\n[[roles]]\nname = "writer"\nexecutor = "command"\n[roles.options]\nargv = ["/bin/true"]\n'


def _marked() -> list[Block]:
    return [
        b
        for page in doc_pages()
        for b in blocks(page)
        if b.marker == "tested-by" and ME in b.marker_value
    ]


def test_some_blocks_are_marked() -> None:
    assert len(_marked()) >= 4


@pytest.mark.parametrize("block", _marked(), ids=lambda b: b.where)
def test_config_block_loads(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert block.lang == "toml", block.where
    for name in list(os.environ):
        if name.startswith("BACKLOG_WORKER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "api-token").write_text("a-token-for-the-docs\n")  # api_token_file = "api-token"
    text = block.body
    if "roles" not in tomllib.loads(text):
        text += ROLE
    path = tmp_path / "worker.toml"
    path.write_text(text)
    config = load_config(path)
    assert config.roles, block.where
