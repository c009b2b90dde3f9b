"""The plugin tested without a tracker, through backlog-worker's ExecutorHarness."""

from pathlib import Path

import pytest
from greeter_executor import Greeter

from plugins.testing import ExecutorHarness
from tracker_client.errors import ExecutorError


@pytest.mark.anyio
async def test_greeter_reports_and_moves_on(tmp_path: Path) -> None:
    harness = ExecutorHarness(title="Ada", workdir=tmp_path)
    outcome = await harness.run(Greeter({"greeting": "hi"}))
    assert outcome.trigger is None  # the role's default trigger
    assert harness.events[0] == ("progress", {"said": "hi, Ada"})


def test_greeter_refuses_a_bad_option() -> None:
    with pytest.raises(ExecutorError, match="greeting"):
        Greeter({"greeting": 3})
