"""``connect_sync``: the blocking twin on a real rail file and the same file served on
127.0.0.1: one event-loop thread for the rail's lifetime (no thread per call), safe to share
between threads, closed cleanly, refusing use after close."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.producer.conftest import Target, count_tasks, make_rail
from tracker_client import connect_sync
from tracker_client.errors import NoRail, NotFound, ValidationFailed

pytestmark = pytest.mark.timeout(60)


def test_calls_share_one_loop_thread_and_many_threads_may_call(target: Target) -> None:
    with connect_sync(target.url, token=target.token) as rail:
        rail.submit("review", "warm up")
        threads = threading.active_count()
        for n in range(20):
            rail.submit("review", f"serial {n}")
        assert threading.active_count() == threads  # no thread per call
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda n: rail.submit("review", f"parallel {n}"), range(40)))
        assert len(set(ids)) == 40
        assert rail.task(ids[0]).stage == "draft"
        assert rail.wait(ids[0], timeout=0.1).outcome == "pending"
        many = rail.submit_many(
            [{"pipeline": "review", "title": "a"}, {"pipeline": "review", "title": "b"}]
        )
        assert len(many) == 2
        assert rail.cancel(many[0]).stage
        assert rail.requeue(many[0]).stage == "draft"
        rail.cancel(many[1])
        assert rail.requeue_dead_letters("review", dry_run=True).requeued == 1
    assert count_tasks(target.path) == 1 + 20 + 40 + 2


def test_errors_cross_the_portal_unchanged_and_write_nothing(target: Target) -> None:
    with connect_sync(target.url, token=target.token) as rail:
        with pytest.raises(ValidationFailed, match="title must be a non-empty string"):
            rail.submit("review", "")
        with pytest.raises(NotFound, match="did you mean review"):
            rail.submit("reveiw", "x")
        with pytest.raises(TypeError, match="unknown option"):
            rail.submit_many([{"pipeline": "review", "title": "x", "prio": 1}])
    assert count_tasks(target.path) == 0


def test_open_close_and_use_after_close(tmp_path: Path) -> None:
    path = make_rail(tmp_path / "rail.db")
    rail = connect_sync(str(path)).open()  # a bare path
    before = threading.active_count()
    assert rail.open() is rail
    rail.submit("review", "x")
    rail.close()
    rail.close()  # idempotent
    assert threading.active_count() < before  # the loop thread ended
    with pytest.raises(RuntimeError, match="the rail is closed"):
        rail.submit("review", "y")
    assert count_tasks(path) == 1


def test_a_missing_rail_file_is_no_rail_and_leaves_no_thread(tmp_path: Path) -> None:
    before = threading.active_count()
    with pytest.raises(NoRail, match="no rail at"), connect_sync(f"sqlite:///{tmp_path}/nope.db"):
        pass
    assert threading.active_count() <= before
    assert not (tmp_path / "nope.db").exists()


def test_eight_threads_submitting_one_dedupe_key_make_one_task(target: Target) -> None:
    with connect_sync(target.url, token=target.token) as rail, ThreadPoolExecutor(8) as pool:
        ids = set(
            pool.map(lambda n: rail.submit("review", f"nightly {n}", dedupe_key="k"), range(8))
        )
    assert len(ids) == 1
    assert count_tasks(target.path) == 1
