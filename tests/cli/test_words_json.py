"""``check --json`` and ``demo --json``: one JSON object on stdout, through the real CLI on a real
SQLite rail (``demo`` as a real process with its real worker processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Rail, invoke, served_in_thread


def _config(tmp_path: Path, url: str, argv: list[str]) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(
        f'[tracker]\nurl = "{url}"\n[[roles]]\nname = "coder"\nexecutor = "command"\n'
        f"[roles.options]\nargv = {json.dumps(argv)}\n"
    )
    return path


def _check(*args: str) -> tuple[int, dict[str, Any]]:
    result = invoke(["check", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_check_json_lists_every_check(rail: Rail, tmp_path: Path) -> None:
    rail.pipeline()
    code, doc = _check("--config", str(_config(tmp_path, rail.url, [sys.executable, "-V"])))
    assert code == 0
    assert doc["ok"] is True
    names = [c["name"] for c in doc["checks"]]
    assert names == ["configuration", "workdir", "tracker", "api_token", "role:coder"]
    for check in doc["checks"]:
        assert check["ok"] is True and check["level"] == "ok" and check["detail"]
    assert "1 pipeline(s)" in doc["checks"][3]["detail"]


def test_check_json_reports_a_failing_executor(rail: Rail, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    code, doc = _check("--config", str(_config(tmp_path, rail.url, [missing])))
    assert code == 1
    assert doc["ok"] is False
    failed = [c for c in doc["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["role:coder"]
    assert failed[0]["level"] == "fail" and "no-such-program" in failed[0]["detail"]


def test_check_json_on_a_config_error_is_still_one_object(tmp_path: Path) -> None:
    code, doc = _check("--config", str(tmp_path / "missing.toml"))
    assert code == 2
    assert doc == {
        "ok": False,
        "checks": [
            {
                "name": "configuration",
                "ok": False,
                "level": "fail",
                "detail": f"config file {tmp_path / 'missing.toml'} does not exist",
            }
        ],
    }


@pytest.mark.timeout(120)
def test_demo_json_is_the_summary(tmp_path: Path) -> None:
    keep = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "demo", "--json", "--tasks", "6", "--keep", str(keep)],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)  # nothing but the object on stdout
    assert doc["ok"] is True and doc["problem"] is None
    assert doc["rail"] == f"sqlite:///{keep.resolve() / 'rail.db'}"
    assert doc["tasks"] == 6
    assert doc["done"] + doc["dead_lettered"] == 6
    assert doc["dead_lettered"] == 1  # the poison task
    assert doc["runs"] == sum(doc["runs_by_worker"].values()) >= 6
    assert doc["throughput_tasks_per_s"] > 0
    assert "finished 6/6" in proc.stderr  # the progress went to stderr


def _token_check(url: str, tmp_path: Path, *args: str) -> str:
    code, doc = _check("--config", str(_config(tmp_path, url, [sys.executable, "-V"])), *args)
    assert code == 0, doc
    [detail] = [c["detail"] for c in doc["checks"] if c["name"] == "api_token"]
    return str(detail)


def test_check_claims_no_token_it_did_not_send(
    rail: Rail, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rail.pipeline()
    detail = _token_check(rail.url, tmp_path)
    assert detail == "rail read (1 pipeline(s)); a rail opened directly takes no api token"
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "s3cret-unused")
    detail = _token_check(rail.url, tmp_path)
    assert detail.endswith("(the one from BACKLOG_WORKER_API_TOKEN is not used)"), detail
    monkeypatch.delenv("BACKLOG_WORKER_API_TOKEN")
    with served_in_thread(tmp_path / "served.db") as url:  # a server that asks for no token
        detail = _token_check(url, tmp_path)
    assert detail == "tracker answered without an api token (0 pipeline(s)): it asks for none"
