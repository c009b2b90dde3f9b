"""Each typed call of :mod:`tracker_client.calls` answers what its row of the contract table
says: a row whose answer model changes fails here, not at a caller that trusted the type."""

from __future__ import annotations

import pytest

from tracker_client import calls
from tracker_client.contract.table import operation

OPS = [getattr(calls, name) for name in calls.__all__ if name != "Op"]


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_each_typed_call_answers_what_its_row_declares(op: calls.Op[object]) -> None:
    assert op.answer_type == operation(op.name).answer_type


def test_every_typed_call_is_listed() -> None:
    bound = {name for name, value in vars(calls).items() if isinstance(value, calls.Op)}
    assert bound == set(calls.__all__) - {"Op"}
    assert len({op.name for op in OPS}) == len(OPS)
