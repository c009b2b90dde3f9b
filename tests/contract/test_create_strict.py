"""Create inputs refuse unknown fields in code; the served tracker still reads bodies leniently.

``TaskCreate(depends_on=[...])`` (a misspelled ``dependencies``) used to be accepted and dropped;
now it is a ``ValidationError`` naming the field, as for ``RetryPolicy`` and ``ArtifactCreate``.
Answers (``Task``...) still ignore unknown fields, and a plain NullTickets client's POST /tasks
with a field the served tracker does not know is still accepted, as NullTickets would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ValidationError

from tests.remote.fake_nulltickets import PIPELINE
from tracker_client.embedded.tracker import EmbeddedTracker
from tracker_client.models import ArtifactCreate, RetryPolicy, Task, TaskCreate
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.timeout(30)]


_TASK = {"pipeline_id": "p", "title": "t"}


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (TaskCreate, {**_TASK, "depends_on": ["x"]}, "depends_on"),
        (TaskCreate, {**_TASK, "delay": 5}, "delay"),
        (RetryPolicy, {"max_attempt": 3}, "max_attempt"),
        (TaskCreate, {**_TASK, "retry_policy": {"tries": 1}}, "tries"),
        (ArtifactCreate, {"kind": "k", "uri": "u", "size": 3}, "size"),
    ],
)
def test_create_models_refuse_unknown_fields_naming_them(
    model: type[BaseModel], data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError, match=field) as info:
        model.model_validate(data)
    assert "Extra inputs are not permitted" in str(info.value)


def test_a_misspelled_keyword_is_refused_in_code() -> None:
    with pytest.raises(ValidationError, match="depends_on"):
        TaskCreate(pipeline_id="p", title="t", depends_on=["x"])  # type: ignore[call-arg]


def test_answers_still_ignore_unknown_fields() -> None:
    task = Task.model_validate(
        {
            "id": "t", "pipeline_id": "p", "stage": "s", "title": "x", "description": "",
            "priority": 0, "task_version": 1, "next_eligible_at_ms": 0, "retry_delay_ms": 0,
            "created_at_ms": 1, "updated_at_ms": 1, "a_future_field": True,
        }
    )  # fmt: skip
    assert task.id == "t"


@pytest.mark.anyio
async def test_the_served_tracker_accepts_unknown_body_fields(tmp_path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    transport = httpx.ASGITransport(app=create_app(tracker))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            pid = await http.post("/pipelines", json={"name": "p", "definition": PIPELINE})
            body = {
                "pipeline_id": pid.json()["id"],
                "title": "t",
                "description": "",
                "some_client_field": 1,
                "retry_policy": {"max_attempts": 2, "jitter": True},
            }
            created = await http.post("/tasks", json=body)
            assert created.status_code == 201, created.text
            bulk = await http.post("/tasks/bulk", json={"tasks": [body, body]})
            assert bulk.status_code == 201, bulk.text
            got = (await http.get(f"/tasks/{created.json()['id']}")).json()
            assert got["max_attempts"] == 2
    finally:
        await tracker.aclose()
