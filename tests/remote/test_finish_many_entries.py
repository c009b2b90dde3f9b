"""``finish_many``'s answer encodes an entry once per shared transition result: items whose
moves the rail planned once share one (frozen) result, and their entries are the same text.
The answer is byte for byte what encoding each item on its own gives, whatever the mix."""

from __future__ import annotations

import json

import pytest

from tracker_client.contract.batch_models import FinishManyOutcome, FinishResult
from tracker_client.errors import LeaseLost
from tracker_client.models import FailResult, TransitionResult
from tracker_client.serve.batch_routes import _entry, _results

pytestmark = pytest.mark.timeout(30)

MOVED = TransitionResult(previous_stage="todo", new_stage="done", trigger="complete")
OTHER = TransitionResult(previous_stage="review", new_stage="done", trigger="approve")


def _one_by_one(outcomes: list[FinishManyOutcome]) -> bytes:
    return b'{"results":[' + b",".join(map(_entry, outcomes)) + b"]"


@pytest.mark.parametrize(
    "outcomes",
    [
        [FinishResult(event_ids=[], transition=MOVED) for _ in range(14)],
        [
            FinishResult(event_ids=[], transition=MOVED),
            FinishResult(event_ids=[7, 8], transition=MOVED),  # events: its own entry
            FinishResult(event_ids=[], transition=OTHER),
            LeaseLost("lease gone", code="lease_expired"),
            FinishResult(event_ids=[], fail=FailResult(retry_scheduled=True)),
            FinishResult(event_ids=[], transition=MOVED),
            FinishResult(event_ids=[], transition=OTHER),
        ],
    ],
)
def test_the_answer_is_each_item_encoded_on_its_own(outcomes: list[FinishManyOutcome]) -> None:
    answer = _results(outcomes)
    assert answer == _one_by_one(outcomes)
    entries = json.loads(answer + b"}")["results"]
    assert len(entries) == len(outcomes)
    for entry, outcome in zip(entries, outcomes, strict=True):
        if isinstance(outcome, FinishResult):
            assert entry == {"status": 200, "result": outcome.model_dump(mode="json")}
        else:
            assert entry["status"] != 200 and entry["error"]["code"] == "lease_expired"
