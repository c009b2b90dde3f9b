"""A claim that lands after its retry does not take the lease from the worker (issue 30).

The worker's claim times out (the tracker is stuck on it) and is sent again with the same
idempotency key; the retry is answered and the run starts. Then the first request lands: the
tracker replays the claim. It used to mint a fresh token for the replay (it stores only token
hashes), so the retry's token, the one the worker holds, stopped working: its next heartbeat
was 401 ``invalid_token``, the run was lost and the task sat held until the lease expired. A
keyed claim's token is now derived from its key, so the replay answers the token the worker
already holds, as a NullTickets server replays a claim.

The tracker is a real ``tracker serve`` behind :class:`tests.faultproxy.FaultProxy` (the
served tracker's own replay: not the proxy's plain-NullTickets mode), the worker a real
``backlog-worker run`` process.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from tests.faultproxy import FaultProxy, Hang
from tests.worker.daemonkit import (
    TOKEN,
    add_task,
    reap,
    run_outcomes,
    serve_tracker,
    spawn_worker,
    stage_and_expiry,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.timeout(90)

TTL_S = 3
#: How long the first claim request is held before it reaches the tracker: past the worker's
#: request timeout (1 s), so the worker has retried and got its lease by then.
HOLD_S = 3.0
#: The executor: wait until the test says the held claim has landed, then run on for one TTL
#: (three heartbeats, each of which would be refused if the lease had been taken away).
_EXECUTOR = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def test_a_claim_landing_after_its_retry_leaves_the_worker_its_lease(tmp_path: Path) -> None:
    landed = tmp_path / "landed"
    hang = Hang("POST /leases/claim", nth=frozenset({1}), hang_s=HOLD_S)
    with serve_tracker(tmp_path) as (url, db):
        task_id = add_task(db)  # there before the first claim: the held one and its retry
        proxy = FaultProxy(int(url.rsplit(":", 1)[1]), hangs=[hang])
        with proxy.start():
            config = write_config(
                tmp_path,
                proxy.url,
                token=TOKEN,
                argv=[sys.executable, "-c", _EXECUTOR, str(landed), str(TTL_S)],
                request_timeout_s=1,
                lease_ttl_s=TTL_S,
            )
            log = tmp_path / "worker.log"
            proc = spawn_worker(config, log)
            try:
                started = time.monotonic()
                wait_for(lambda: proxy.stats["hung_sent"] == 1, 30, "the held claim to land")
                # The retry was answered first: the run holds its lease while the first lands.
                assert run_outcomes(db, task_id) == [("running", None)]
                landed.touch()
                wait_for(
                    lambda: stage_and_expiry(db, task_id)[0] == "done", 45, "the task to be done"
                )
                took = time.monotonic() - started
                runs = run_outcomes(db, task_id)
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=20)
            finally:
                reap(proc)
    text = log.read_text()
    print(f"done {took:.2f}s after the worker started; runs {runs}; proxy {dict(proxy.stats)}")
    claims = [line for line in proxy.seen if line.startswith("POST /leases/claim ")]
    assert proxy.stats["hung"] == 1 and len(claims) >= 2, (proxy.stats, claims)
    # One run, completed under the lease the retry got: no 401, no lost lease, no second run.
    assert runs == [("completed", None)], text
    assert "invalid_token" not in text and "lease lost" not in text, text
    assert stage_and_expiry(db, task_id) == ("done", 0)
    # Not the old way round: the run waited neither for the lease to expire nor for a rerun.
    assert took < HOLD_S + 2 * TTL_S + 5, took
