"""The worker's metrics piece by piece: bounded labels, error kinds, cancelled attempts, the
queue refresh that counts its errors and goes on, the ``/metrics`` listener's answers, the
queue gauges of a rail without the embedded figures, and nothing imported when metrics are off.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import prometheus_client
import pytest

from tests.worker.test_metrics import poll, samples, value
from tracker_client.errors import (
    BacklogFull,
    Conflict,
    InvalidTransition,
    LeaseLost,
    NotFound,
    TokenRefused,
    TrackerCorrupt,
    TrackerError,
    TrackerRejected,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)
from tracker_client.factory import open_tracker
from tracker_client.models import QueueStats, RoleStats
from tracker_client.serve.metrics_http import bind, queue_families, serve_metrics
from worker.config.telemetry import MetricsConfig
from worker.run.settings import RunResult
from worker.telemetry import WorkerView
from worker.telemetry.metrics import ERROR_KINDS, WorkerMetrics, error_kind

pytestmark = pytest.mark.anyio


def metrics(**kw: float) -> WorkerMetrics:
    return WorkerMetrics(MetricsConfig(listen="127.0.0.1:0", **kw))


def found(m: WorkerMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return samples(prometheus_client.generate_latest(m.registry).decode())


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (TrackerUnavailable("down"), "unavailable"),
        (LeaseLost("gone", code="expired"), "lease_lost"),
        (InvalidTransition("no", allowed=["a"]), "invalid_transition"),
        (Conflict("changed"), "conflict"),
        (NotFound("none"), "not_found"),
        (BacklogFull("full", role="r", depth=1, cap=1), "backlog_full"),
        (Unsupported("old"), "unsupported"),
        (TokenRefused("bad token"), "token_refused"),
        (ValidationFailed("bad"), "validation_failed"),
        (TrackerRejected("no"), "rejected"),
        (TrackerCorrupt("rot"), "corrupt"),
        (TrackerError("?"), "other"),
        (TimeoutError(), "timeout"),
        (RuntimeError("bug"), "other"),
    ],
)
def test_error_kinds_are_a_small_fixed_set(error: BaseException, kind: str) -> None:
    assert error_kind(error) == kind
    assert kind in ERROR_KINDS


def test_labels_stay_bounded_and_cancellations_are_no_errors() -> None:
    m = metrics()
    try:
        m.tracker_call("heartbeat", started_ns=0, ended_ns=2_000_000, error=None)
        m.tracker_call("made_up_action", started_ns=0, ended_ns=1, error=RuntimeError("x"))
        m.tracker_call("heartbeat", started_ns=0, ended_ns=1, error=KeyboardInterrupt())
        run = m.run(None, "coder", claim_started_ns=0, claim_ended_ns=0)  # type: ignore[arg-type]
        with run.phase("executor"):
            pass
        run.finished(RunResult("lost", "some-new-code"), duration_ns=3_000_000_000)
        run.finished(RunResult("weird"), duration_ns=1)
        run.finished(RunResult("failed", "boom", dead_lettered=True), duration_ns=1)
        m.claim_failed("coder", TrackerUnavailable("down"))
        s = found(m)
    finally:
        m.socket.close()
    duration = "backlog_worker_tracker_request_duration_seconds"
    assert value(s, f"{duration}_count", action="heartbeat") == 1  # the cancelled one: not
    assert value(s, f"{duration}_sum", action="heartbeat") == pytest.approx(0.002)
    assert value(s, "backlog_worker_tracker_errors_total", action="other", kind="other") == 1
    assert not [k for k in s if dict(k[1]).get("action") == "made_up_action"]
    losses = "backlog_worker_lease_losses_total"
    assert value(s, losses, role="coder", reason="other") == 1
    runs = "backlog_worker_runs_finished_total"
    assert value(s, runs, role="coder", outcome="lost") == 1
    assert value(s, runs, role="coder", outcome="other") == 1
    assert value(s, "backlog_worker_runs_dead_lettered_total", role="coder") == 1
    assert value(s, "backlog_worker_run_duration_seconds_sum", role="coder") == pytest.approx(3.0)
    assert value(s, "backlog_worker_claims_total", role="coder", result="error") == 1
    phase = "backlog_worker_run_phase_duration_seconds_count"
    assert value(s, phase, role="coder", phase="executor") == 1
    # its own registry: the process-global one has none of it
    assert "backlog_worker" not in prometheus_client.generate_latest().decode()


async def test_queue_read_errors_are_counted_and_the_metrics_go_on(tmp_path: Path) -> None:
    tracker = await open_tracker(f"sqlite:///{tmp_path}/rail.db", create=True)
    await tracker.aclose()  # a closed tracker: every queue read fails
    m = metrics(queue_interval_s=0.05)
    port = m.socket.getsockname()[1]
    m.attach(WorkerView(tracker, slots=lambda: (1, 4), roles=lambda: ["coder"], agent_id="a"))
    async with anyio.create_task_group() as tg, httpx.AsyncClient(timeout=5) as client:
        tg.start_soon(m.serve)
        errors = "backlog_worker_queue_stats_errors_total"

        async def two_errors() -> bool:
            kinds = [k for k in found(m) if k[0] == errors]
            return len(kinds) == 1 and sum(found(m)[k] for k in kinds) >= 2

        await poll(two_errors, "two failed queue reads counted")
        answer = await client.get(f"http://127.0.0.1:{port}/metrics")
        head = await client.head(f"http://127.0.0.1:{port}/metrics")
        tg.cancel_scope.cancel()
    assert answer.status_code == 200 and head.status_code == 200 and head.content == b""
    s = samples(answer.text)
    assert value(s, "backlog_worker_slots_busy") == 1
    assert value(s, "backlog_worker_slots") == 4
    assert value(s, "backlog_worker_queue_stats_updated_timestamp_seconds") == 0
    assert not [k for k in s if k[0] == "backlog_worker_queue_waiting"]  # never read: not shown


def test_queue_gauges_of_a_plain_rail_leave_out_what_it_does_not_give() -> None:
    stats = QueueStats(
        roles=[
            RoleStats(
                role="coder",
                claimable_count=3,
                oldest_claimable_age_ms=1500,
                failed_count=2,
                stuck_count=0,
                near_expiry_leases=0,
            )
        ],
        generated_at_ms=0,
    )
    families = {f.name: f for f in queue_families("x", stats, ["coder", "other"])}
    got = {
        (f.name, tuple(s.labels.values())): s.value for f in families.values() for s in f.samples
    }
    assert got[("x_queue_waiting", ("coder",))] == 3
    assert got[("x_queue_dead_lettered", ("coder",))] == 2
    assert got[("x_queue_oldest_waiting_age_seconds", ("coder",))] == 1.5
    assert ("x_queue_running", ("coder",)) not in got  # NullTickets has no running count
    assert got[("x_queue_waiting", ("other",))] == 0  # a role no pipeline declares


async def test_the_listener_answers_only_get_metrics_and_closes_oversized_requests() -> None:
    sock = bind("127.0.0.1", 0, what="test")
    port = sock.getsockname()[1]

    async def render() -> bytes:
        return b"x 1\n"

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_metrics(sock, render, token="s3cret"))
        async with httpx.AsyncClient(timeout=5) as client:
            base = f"http://127.0.0.1:{port}"
            ok = await client.get(f"{base}/metrics?x=1", headers={"Authorization": "Bearer s3cret"})
            lower = await client.get(f"{base}/metrics", headers={"authorization": "bearer s3cret"})
            refused = await client.get(f"{base}/metrics", headers={"Authorization": "Basic s3cret"})
            elsewhere = await client.get(f"{base}/", headers={"Authorization": "Bearer s3cret"})
        async with await anyio.connect_tcp("127.0.0.1", port) as raw:
            await raw.send(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 40_000)
            closed = b""
            with anyio.fail_after(5):
                try:
                    while chunk := await raw.receive():
                        closed += chunk
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass
        tg.cancel_scope.cancel()
    assert (ok.status_code, ok.text) == (200, "x 1\n")
    assert lower.status_code == 200
    assert refused.status_code == 401 and "s3cret" not in refused.text
    assert elsewhere.status_code == 404
    assert closed == b""  # no answer to a request head over the limit: closed


def test_a_bound_address_is_named_in_the_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(
            Exception, match=rf"\[metrics\] listen: cannot listen on 127\.0\.0\.1:{port}"
        ):
            WorkerMetrics(MetricsConfig(listen=f"127.0.0.1:{port}"))


def test_nothing_is_imported_when_metrics_are_off() -> None:
    code = (
        "import sys, json\n"
        "from worker.config.telemetry import MetricsConfig, TracingConfig\n"
        "from worker.telemetry import NOOP\n"
        "from worker.telemetry.setup import build\n"
        "assert build(MetricsConfig(), TracingConfig()) is NOOP\n"
        "names = ('prometheus', 'worker.telemetry.metrics', 'tracker_client.serve')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(names))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


async def test_scrapers_that_reset_mid_answer_do_not_end_the_listener() -> None:
    sock = bind("127.0.0.1", 0, what="test")
    port = sock.getsockname()[1]

    async def render() -> bytes:
        await anyio.sleep(0.05)  # the scraper is gone by the time the answer is sent
        return b"x 1\n" * 50_000

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_metrics(sock, render))
        for _ in range(5):
            raw = socket.create_connection(("127.0.0.1", port))
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            raw.close()  # a reset, not a goodbye
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.get(f"http://127.0.0.1:{port}/metrics")
        tg.cancel_scope.cancel()
    assert answer.status_code == 200 and answer.text.startswith("x 1\n")


def test_the_listener_works_on_trio_too() -> None:
    """The worker runs on anyio only (tests/worker/test_daemon.py runs it on trio): so does its
    ``/metrics`` listener."""
    pytest.importorskip("trio", minversion="0.26")
    sock = bind("127.0.0.1", 0, what="test")
    port = sock.getsockname()[1]

    async def render() -> bytes:
        return b"x 1\n"

    def scrape() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = b""
            while chunk := raw.recv(4096):
                data += chunk
            return data

    async def main() -> bytes:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: serve_metrics(sock, render))
            answer = await anyio.to_thread.run_sync(scrape)
            tg.cancel_scope.cancel()
        return answer

    answer = anyio.run(main, backend="trio")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nx 1\n")
