"""Exit codes tell the truth: ``run --drain`` and ``check`` against a real served tracker that
refuses the token or whose claims fail, through real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.worker.daemonkit import (
    TOKEN,
    RouteFaults,
    clean_env,
    reap,
    serve_tracker,
    spawn_worker,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def _drain(config: Path, log: Path) -> int:
    proc = spawn_worker(config, log, "--drain")
    try:
        return proc.wait(timeout=60)
    finally:
        reap(proc)


def test_drain_with_a_wrong_token_exits_nonzero_naming_the_token(tmp_path: Path) -> None:
    with serve_tracker(tmp_path) as (url, _):
        config = write_config(tmp_path, url, token="not-the-token", argv=["true"])
        rc = _drain(config, tmp_path / "worker.log")
    log = (tmp_path / "worker.log").read_text()
    assert rc == 1, log  # the README's "the tracker refused"
    assert "queue drained" not in log
    last = log.strip().splitlines()[-1]
    assert last.startswith("error: "), log
    assert "401" in last and "api token" in last, last
    assert "not-the-token" not in log


def test_drain_while_claims_answer_5xx_exits_nonzero_naming_the_answer(tmp_path: Path) -> None:
    with serve_tracker(tmp_path) as (url, _), RouteFaults(int(url.rsplit(":", 1)[1])) as proxy:
        proxy.set("POST /leases/claim", 503)
        # report_retry_budget_s = 3 in the test config: a drain waits out 503s that long.
        config = write_config(tmp_path, proxy.url, token=TOKEN, argv=["true"])
        rc = _drain(config, tmp_path / "worker.log")
        claims = proxy.count("POST /leases/claim")
    log = (tmp_path / "worker.log").read_text()
    assert rc == 3, log  # the README's "tracker unreachable"
    assert "queue drained" not in log
    last = log.strip().splitlines()[-1]
    assert "503" in last and "/leases/claim" in last, last
    assert claims > 1  # retried within the budget before giving up


def test_check_verifies_the_token(tmp_path: Path) -> None:
    with serve_tracker(tmp_path) as (url, _):
        results = {}
        for token in ("not-the-token", TOKEN):
            config = write_config(tmp_path, url, token=token, argv=["true"])
            results[token] = subprocess.run(
                [sys.executable, "-m", "worker", "check", "--config", str(config)],
                capture_output=True,
                text=True,
                env=clean_env(),
                timeout=60,
            )
    wrong, right = results["not-the-token"], results[TOKEN]
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "FAIL" in wrong.stdout and "401" in wrong.stdout, wrong.stdout
    assert "api token" in wrong.stdout
    assert right.returncode == 0, right.stdout + right.stderr
    assert "accepted the api token" in right.stdout
