"""The dashboard's task page names a subtask's parent (extension ``subtasks``), linked."""

from __future__ import annotations

import httpx
import pytest

from tests.dashboard.conftest import TOKEN, Seeded
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_a_subtask_page_links_its_parent(
    served: tuple[httpx.AsyncClient, EmbeddedTracker, Seeded],
) -> None:
    http, tracker, ids = served
    child = await tracker.create_task(
        TaskCreate(pipeline_id=ids.pipeline, title="part", parent_id=ids.script)
    )
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    page = (await http.get(f"/ui/tasks/{child}", headers=bearer)).text
    link = f'<a href="/ui/tasks/{ids.script}" id="task-parent"><code class="id">{ids.script}</code>'
    assert link in page  # the whole id, linked
    top = (await http.get(f"/ui/tasks/{ids.script}", headers=bearer)).text
    assert 'id="task-parent"' not in top
