"""Known secrets never reach the tracker, whatever the executor prints or returns.

The log masks the api token; what a run writes to the tracker (events, artifacts, the fail
error, a transition's instructions and usage) must not carry it either, nor the lease token, nor
a provider key from the worker's environment. The executors here are a real command (a child
process printing the secrets) and an in-process one returning them in every field.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from plugins.api import ExecutionContext, Failure, Transition
from plugins.command.executor import CommandExecutor
from tests.worker.conftest import FnExecutor
from tests.worker.runkit import claim_one, run_task, settings
from tracker_client.factory import open_tracker
from tracker_client.models import Lease
from tracker_client.protocol import Tracker
from worker import scrub
from worker.logs import add_secret

pytestmark = pytest.mark.anyio

#: A child that prints its secrets on stdout and stderr, then fails (no braces: placeholders).
LEAKER = (
    "import os, sys\n"
    "print('api', os.environ['LEAK_A'], 'lease', os.environ['LEAK_B'], os.environ['LEAK_C'])\n"
    "sys.stderr.write('fatal: token ' + os.environ['LEAK_A'] + ' ' + os.environ['LEAK_B'])\n"
    "sys.exit(3)\n"
)


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


@pytest.fixture
def api_token() -> str:
    """A fresh api token, registered with the log's redaction as the CLI does at start-up."""
    token = f"api-{uuid.uuid4().hex[:20]}"
    add_secret(token)
    return token


@pytest.fixture
def provider_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A provider key in the worker's environment (as nullclaw's ``api_key_env`` reads it)."""
    key = f"sk-{uuid.uuid4().hex[:24]}"
    monkeypatch.setenv("TESTPROVIDER_API_KEY", key)
    scrub.refresh()  # the worker reads its environment once; this test changed it
    return key


async def everything_written(tracker: Tracker, lease: Lease) -> str:
    """Every event, artifact and run record of the task, as one JSON text."""
    task_id = lease.task.id
    events = (await tracker.list_task_events(task_id, limit=1000)).items
    artifacts = (await tracker.list_artifacts(task_id=task_id)).items
    runs = await tracker.list_runs(task_id)
    return json.dumps(
        {
            "events": [e.model_dump(mode="json") for e in events],
            "artifacts": [a.model_dump(mode="json") for a in artifacts],
            "runs": [r.model_dump(mode="json") for r in runs],
        }
    )


async def test_a_command_printing_secrets_leaves_none_in_the_tracker(
    tracker: Tracker, tmp_path: Path, api_token: str, provider_key: str
) -> None:
    lease = await claim_one(tracker)
    lease_token = lease.lease_token.get_secret_value()
    executor = CommandExecutor(
        {
            "argv": [sys.executable, "-c", LEAKER],
            "env": {"LEAK_A": api_token, "LEAK_B": lease_token, "LEAK_C": provider_key},
            "exit_codes": {"0": "complete"},
        }
    )
    result = await run_task(tracker, lease, executor, settings(tmp_path))
    assert result.status == "failed"
    written = await everything_written(tracker, lease)
    assert "fatal: token" in written  # the output itself did arrive...
    assert "[redacted]" in written
    for secret in (api_token, lease_token, provider_key):  # ...without any secret in it
        assert secret not in written


async def test_secrets_in_events_artifacts_and_a_transition_are_masked(
    tracker: Tracker, tmp_path: Path, api_token: str, provider_key: str
) -> None:
    lease = await claim_one(tracker)
    lease_token = lease.lease_token.get_secret_value()
    secrets = (api_token, lease_token, provider_key)
    digest = "ab" * 32  # a sha256 is data, not a secret: it stays

    async def leak(ctx: ExecutionContext) -> Any:
        await ctx.report("progress", {"line": f"using {api_token}", api_token: lease_token})
        await ctx.artifact(
            "file",
            f"file:///tmp/{provider_key}.txt",
            sha256=digest,
            meta={"note": f"key={provider_key}", "list": [lease_token]},
        )
        return Transition(
            instructions=f"next: use {api_token}", usage={"token": lease_token, "n": 1}
        )

    result = await run_task(tracker, lease, FnExecutor(leak), settings(tmp_path))
    assert result.status == "transitioned"
    written = await everything_written(tracker, lease)
    assert digest in written and "next: use [redacted]" in written
    for secret in secrets:
        assert secret not in written


async def test_secrets_in_a_failure_are_masked(
    tracker: Tracker, tmp_path: Path, api_token: str
) -> None:
    lease = await claim_one(tracker)
    lease_token = lease.lease_token.get_secret_value()

    async def fail(ctx: ExecutionContext) -> Any:
        return Failure(
            reason="boom",
            message=f"login with {api_token} failed",
            details={"token": lease_token},
            usage={"auth": api_token},
        )

    result = await run_task(tracker, lease, FnExecutor(fail), settings(tmp_path))
    assert result.status == "failed"
    written = await everything_written(tracker, lease)
    assert "login with [redacted] failed" in written
    assert api_token not in written and lease_token not in written


#: Prints a secret in two writes with a pause between them, so the worker reads it in two pieces.
SPLITTER = (
    "import os, sys, time\n"
    "secret = os.environ['LEAK_A']\n"
    "half = len(secret) // 2\n"
    "sys.stdout.write('key: ' + secret[:half]); sys.stdout.flush()\n"
    "time.sleep(0.3)\n"
    "sys.stdout.write(secret[half:] + ' done' + chr(10)); sys.stdout.flush()\n"
)


async def test_a_secret_split_across_two_output_chunks_is_still_masked(
    tracker: Tracker, tmp_path: Path, api_token: str
) -> None:
    lease = await claim_one(tracker)
    executor = CommandExecutor(
        {"argv": [sys.executable, "-c", SPLITTER], "env": {"LEAK_A": api_token}}
    )
    result = await run_task(tracker, lease, executor, settings(tmp_path))
    assert result.status == "transitioned"
    events = (await tracker.list_task_events(lease.task.id, limit=1000)).items
    texts = [
        item["text"] for e in events if e.kind == "output" for item in e.data.get("batch", [e.data])
    ]
    assert "".join(texts) == "key: [redacted] done\n"
    half = len(api_token) // 2
    assert not any(api_token[:half] in t or api_token[half:] in t for t in texts)


def test_the_workers_redaction_is_its_own_not_an_executors() -> None:
    """The worker's scrubbing lives in the worker (:mod:`worker.scrub`, on the shared masking of
    :mod:`plugins.proc.redact`): no module of ``worker/`` imports a built-in executor's package,
    so a change to one executor cannot change what the worker masks."""
    import ast

    root = Path(__file__).resolve().parents[2]
    executors = ("plugins.command", "plugins.nullclaw", "plugins.python")
    found = []
    for path in sorted((root / "worker").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [
                f"{path.relative_to(root)}:{node.lineno}: {name}"
                for name in names
                if name.startswith(executors)
            ]
    assert not found, "\n".join(found)
    assert scrub.RunScrubber("lease-token-0123").get().text("x lease-token-0123") == (
        "x [redacted]"
    )
