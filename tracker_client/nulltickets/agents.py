"""The agent extensions of the remote client: ``checkpoint``, ``list_upstream`` and
``transition_task``, as :class:`AgentCalls`, a base of
:class:`~tracker_client.nulltickets.client.RemoteTracker`.

Each is a row of the contract table sent by the client's :class:`~.wire.Wire`; on a server that
does not list the extension each is ``Unsupported`` before anything is sent (the wire's rule).
The lease operations' extension fields (a heartbeat's ``checkpoint``, a transition's
``wait_for``) are in :mod:`.leases`. May touch: the wire only.
"""

from __future__ import annotations

from typing import Any

from tracker_client.agent_models import Upstream
from tracker_client.capabilities import LeaseRef
from tracker_client.models import TransitionResult
from tracker_client.nulltickets.codec import check_json
from tracker_client.nulltickets.wire import Wire

__all__ = ["AgentCalls"]


class AgentCalls:
    """The agent extension operations of the remote client (over its ``_wire``)."""

    _wire: Wire

    async def checkpoint(self, lease: LeaseRef, data: Any) -> None:
        """``POST /runs/{run_id}/checkpoint`` (extension ``checkpoints``)."""
        check_json(data, "checkpoint")
        await self._wire.send("checkpoint", lease.run_id, body={"data": data}, lease=lease)

    async def list_upstream(self, task_id: str) -> list[Upstream]:
        """``GET /tasks/{task_id}/upstream`` (extension ``upstream``)."""
        return await self._wire.call("list_upstream", task_id, into=list[Upstream])

    async def transition_task(
        self,
        task_id: str,
        trigger: str,
        *,
        expected_stage: str,
        expected_task_version: int | None = None,
        instructions: str | None = None,
        idempotency_key: str | None = None,
    ) -> TransitionResult:
        """``POST /tasks/{task_id}/transition`` (extension ``human_steps``; a plain NullTickets
        server moves a task only under a lease: ``Unsupported``)."""
        body: dict[str, Any] = {"trigger": trigger, "expected_stage": expected_stage}
        if expected_task_version is not None:
            body["expected_task_version"] = expected_task_version
        if instructions is not None:
            body["instructions"] = instructions
        return await self._wire.call(
            "transition_task",
            task_id,
            body=body,
            idempotency_key=idempotency_key,
            into=TransitionResult,
        )
