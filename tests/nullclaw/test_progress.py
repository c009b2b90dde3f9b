"""ProgressForwarder: batching, caps and redaction across flush boundaries (no subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.nullclaw.progress import ProgressForwarder
from plugins.proc.redact import Redactor

from .conftest import RecordingSink, make_ctx

pytestmark = pytest.mark.anyio
SECRET = "SECRETVALUE123"


def _forwarder(tmp_path: Path, sink: RecordingSink, **kw: object) -> ProgressForwarder:
    args: dict[str, object] = {
        "interval_s": 60.0,
        "chunk_chars": 1000,
        "max_chars": 10_000,
        "forward_stderr": True,
        "redactor": Redactor([SECRET]),
    }
    args.update(kw)
    return ProgressForwarder(make_ctx(tmp_path, sink), **args)  # type: ignore[arg-type]


async def test_a_secret_split_anywhere_across_flushes_is_redacted(tmp_path: Path) -> None:
    text = f"abc {SECRET} def".encode()
    for cut in range(len(text) + 1):
        sink = RecordingSink()
        fwd = _forwarder(tmp_path, sink)
        await fwd.on_stdout(text[:cut])
        await fwd.flush()
        await fwd.on_stdout(text[cut:])
        await fwd.flush(final=True)
        out = "".join(p["text"] for p in sink.items("progress"))
        assert out == "abc [redacted] def", cut


async def test_utf8_split_inside_a_character_and_bad_bytes(tmp_path: Path) -> None:
    sink = RecordingSink()
    fwd = _forwarder(tmp_path, sink, redactor=None)
    data = "café".encode()
    await fwd.on_stderr(data[:4])  # cuts the é in half
    await fwd.flush()
    await fwd.on_stderr(data[4:] + b"\xff")
    await fwd.flush(final=True)
    out = "".join(p["text"] for p in sink.items("progress"))
    assert out == "café\ufffd"


async def test_budget_caps_progress_with_one_dropped_note(tmp_path: Path) -> None:
    sink = RecordingSink()
    fwd = _forwarder(tmp_path, sink, max_chars=100, chunk_chars=40, redactor=None)
    for _ in range(10):
        await fwd.on_stdout(b"x" * 50)
        await fwd.flush()
    await fwd.flush(final=True)
    items = sink.items("progress")
    assert sum(len(p.get("text", "")) for p in items) == 100
    assert [p for p in items if p.get("dropped")] == [items[-1]]
    assert all(len(p.get("text", "")) <= 40 for p in items)


async def test_zero_budget_forwards_nothing(tmp_path: Path) -> None:
    sink = RecordingSink()
    fwd = _forwarder(tmp_path, sink, max_chars=0)
    await fwd.on_stdout(b"hello")
    await fwd.flush(final=True)
    assert sink.items("progress") == []
    assert fwd.tail("stdout") == "hello"
