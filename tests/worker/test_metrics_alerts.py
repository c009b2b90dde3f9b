"""contrib/prometheus/alerts.yml: a rule file Prometheus can load whose every metric exists.

The file is parsed as YAML (as Prometheus reads it); each rule must have an alert name, an
expression with balanced brackets, a severity and a summary; every ``backlog_*`` or
``process_*`` name an expression uses must be a series the worker's or the served tracker's
registry really exposes (a counter as ``<name>_total``, a histogram as ``_bucket``/``_count``/
``_sum``), with label names the metric has.
"""

from __future__ import annotations

import re
from pathlib import Path

import prometheus_client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tracker_client.factory import open_tracker
from tracker_client.serve.metrics import ServedMetrics
from tracker_client.sweeps import SweepCounts
from worker.config.telemetry import MetricsConfig
from worker.telemetry import WorkerView
from worker.telemetry.metrics import WorkerMetrics

pytestmark = pytest.mark.anyio

ALERTS = Path(__file__).resolve().parents[2] / "contrib" / "prometheus" / "alerts.yml"
_NAME = re.compile(r"\b((?:backlog_worker|backlog_tracker|process)_[a-z_]+)\b(\{[^}]*\})?")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
_LABEL_FREE = {"instance", "job", "le"}  # added by Prometheus (and a histogram's buckets)


def _series(text: str) -> dict[str, set[str]]:
    """Every series name the exposition text declares, with its label names (from the
    ``# TYPE`` of each family, so a labelled counter no sample touched yet still counts)."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        labels = {name for s in family.samples for name in s.labels}
        for suffix in _SUFFIXES.get(family.type, ("",)):
            out[family.name + suffix] = labels
    return out


async def _exposed(tmp_path: Path, types: dict[str, str] | None = None) -> dict[str, set[str]]:
    tracker = await open_tracker(f"sqlite:///{tmp_path}/rail.db", create=True)
    worker = WorkerMetrics(MetricsConfig(listen="127.0.0.1:0"))
    try:
        worker.attach(WorkerView(tracker, lambda: (0, 1), lambda: ["coder"], "agent"))
        worker._queue = await tracker.queue_stats()
        _touch_worker(worker)
        served = ServedMetrics(
            tracker,
            open_connections=lambda: 1,
            refused_connections=lambda: 0,
            sweeps=SweepCounts(),
        )
        served.requests.labels(operation="claim", status_class="2xx").inc()
        served.duration.labels(operation="claim").observe(0.1)
        served.rate_limited.labels(role="coder").inc()
        text = (await served.render()).decode() + (await worker.render()).decode()
    finally:
        worker.socket.close()
        await tracker.aclose()
    if types is not None:
        types.update({f.name: f.type for f in text_string_to_metric_families(text)})
    return _series(text)


def _touch_worker(m: WorkerMetrics) -> None:
    """One sample of each labelled metric, so its label names show."""
    m.claims.labels(role="coder", result="task").inc()
    m.runs.labels(role="coder", outcome="transitioned").inc()
    m.dead_lettered.labels(role="coder").inc()
    m.run_duration.labels(role="coder").observe(1)
    m.phase_duration.labels(role="coder", phase="executor").observe(1)
    m.tracker_duration.labels(action="claim").observe(0.01)
    m.tracker_errors.labels(action="claim", kind="unavailable").inc()
    m.lease_losses.labels(role="coder", reason="expired").inc()
    m.queue_errors.labels(kind="unavailable").inc()


def _rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_rule_is_complete_and_balanced() -> None:
    rules = _rules()
    assert len(rules) >= 10
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        expr = str(rule["expr"])
        for opening, closing in ("()", "[]", "{}"):
            assert expr.count(opening) == expr.count(closing), (rule["alert"], expr)
        labels, notes = rule["labels"], rule["annotations"]
        assert isinstance(labels, dict) and labels["severity"] in {"critical", "warning", "info"}
        assert isinstance(notes, dict) and notes["summary"]


async def test_every_metric_an_alert_names_exists(tmp_path: Path) -> None:
    exposed = await _exposed(tmp_path)
    used = 0
    for rule in _rules():
        for found in _NAME.finditer(str(rule["expr"])):
            name, selector = found.group(1), found.group(2) or ""
            assert name in exposed, f"{rule['alert']}: {name} is no metric of the registries"
            for label in re.findall(r"([a-z_]+)\s*(?:=|!=|=~|!~)", selector):
                assert label in exposed[name] | _LABEL_FREE, f"{rule['alert']}: {name}{{{label}}}"
            used += 1
    assert used >= 15
    # the metrics' own registries, never the process-wide one
    assert "backlog_" not in prometheus_client.generate_latest().decode()


async def test_metric_names_follow_the_prometheus_conventions(tmp_path: Path) -> None:
    """``_total`` belongs to counters only: a gauge named so (``backlog_worker_slots_total``
    was one) reads as a counter to every query and linter."""
    types: dict[str, str] = {}
    await _exposed(tmp_path, types)
    gauges = {name for name, kind in types.items() if kind == "gauge"}
    assert "backlog_worker_slots" in gauges
    assert not [name for name in gauges if name.endswith("_total")]
    assert {"backlog_tracker_lease_expiries", "backlog_worker_lease_expiries"} <= {
        name for name, kind in types.items() if kind == "counter"
    }
