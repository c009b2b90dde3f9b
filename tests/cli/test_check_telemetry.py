"""``backlog-worker check`` finds what ``run`` would refuse in ``[metrics]`` and ``[tracing]``.

Real processes (``python -m worker check --json``) on an embedded rail: a free metrics address
is ok, one held by another socket (the running worker's, most often) is a warning, one that can't
be bound here is a failure naming ``[metrics] listen``; tracing on without the ``otel`` extra
(blocked by an import hook, as if it were not installed) fails naming the extra, as ``run``
does; with it, ok.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.worker.daemonkit import clean_env, make_rail
from tests.worker.tracekit import BLOCK_IMPORTS

pytestmark = pytest.mark.timeout(60)

#: ``python -c`` wrapper: argv[1] is a package made unimportable (``-``: none), then check's argv.
_WRAPPER = (
    "import sys\nblock = sys.argv.pop(1)\n"
    + BLOCK_IMPORTS
    + "from worker.cli import main\nsys.argv[0] = 'backlog-worker'\nmain()\n"
)


def _check(tmp_path: Path, extra: str, block: str = "-") -> tuple[int, dict[str, Any]]:
    db = tmp_path / "rail.db"
    if not db.exists():
        make_rail(tmp_path)
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[tracker]\nurl = "sqlite://{db}"\n\n{extra}\n\n[[roles]]\n'
        f'name = "coder"\nexecutor = "command"\n[roles.options]\n'
        f'argv = [{json.dumps(sys.executable)}, "-c", "pass"]\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, block, "check", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=50,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def _named(report: dict[str, Any], name: str) -> list[tuple[str, str]]:
    return [(c["level"], c["detail"]) for c in report["checks"] if c["name"] == name]


def test_a_free_metrics_address_is_ok_and_a_held_one_a_warning(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code, report = _check(tmp_path, f'[metrics]\nlisten = "127.0.0.1:{port}"')
        assert code == 0, report
        ((level, detail),) = _named(report, "metrics")
        assert level == "warn" and f"127.0.0.1:{port} is in use" in detail, detail
    code, report = _check(tmp_path, f'[metrics]\nlisten = "127.0.0.1:{port}"')
    assert (code, _named(report, "metrics")[0][0]) == (0, "ok"), report


def test_a_metrics_address_that_cannot_be_bound_fails_naming_the_key(tmp_path: Path) -> None:
    code, report = _check(tmp_path, '[metrics]\nlisten = "192.0.2.1:9464"')  # not this host's
    assert code != 0 and report["ok"] is False, report
    ((level, detail),) = _named(report, "metrics")
    assert level == "fail" and "[metrics] listen" in detail and "192.0.2.1:9464" in detail


def test_tracing_without_the_extra_fails_naming_it_and_with_it_is_ok(tmp_path: Path) -> None:
    tracing = (
        '[tracing]\nenabled = true\nexport = "otlp"\nendpoint = "http://127.0.0.1:9/v1/traces"'
    )
    code, report = _check(tmp_path, tracing, block="opentelemetry")
    assert code != 0, report
    ((level, detail),) = _named(report, "tracing")
    assert level == "fail" and "pip install 'backlog-worker[otel]'" in detail, detail
    code, report = _check(tmp_path, tracing, block="opentelemetry.exporter")
    ((level, detail),) = _named(report, "tracing")
    assert (
        level == "fail"
        and 'export = "otlp" (the OTLP/HTTP exporter) needs the otel extra' in detail
    ), detail
    pytest.importorskip("opentelemetry.sdk", reason="pip install -e '.[test]' (the otel extra)")
    code, report = _check(tmp_path, tracing)
    assert (code, _named(report, "tracing")) == (
        0,
        [("ok", "[tracing] exports to http://127.0.0.1:9/v1/traces (otlp)")],
    ), report
