"""What an executor can ask of the rail beyond reports: memory, subtasks, checkpoints, upstream.

:class:`~plugins.api.ExecutionContext` exposes these as ``ctx.store`` (a :class:`Store`),
``ctx.spawn``, ``ctx.checkpoint`` / ``ctx.previous_checkpoint`` and ``ctx.upstream``; each one
goes to the context's sink when it implements :class:`AgentSink` (the worker's does, over the
run's lease session with the worker's credentials; :class:`plugins.testing.RecordingSink` does in
memory). A sink without it makes these calls raise :class:`AgentUnsupported` naming the call.

The checks that need no rail happen here, before anything is sent, so a bad input writes
nothing: a store value or checkpoint that is not JSON (``ValueError`` naming the key and the
type), a checkpoint over :data:`~tracker_client.agent_models.MAX_CHECKPOINT_BYTES` (``ValueError``
naming the limit).

Pure plugin surface: imports the rail's data models only (no tracker, no lease).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

from tracker_client.agent_models import MAX_CHECKPOINT_BYTES, Upstream
from tracker_client.models import StoreEntry

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "AgentSink",
    "AgentUnsupported",
    "Store",
    "checkpoint_json",
    "json_value",
]


#: ``Store.list`` shadows the builtin inside the class body; its answers' type, spelled once.
_Entries: TypeAlias = list[StoreEntry]


class AgentUnsupported(RuntimeError):
    """The context's sink has no agent operations (a custom sink without :class:`AgentSink`)."""


@runtime_checkable
class AgentSink(Protocol):
    """The optional extension of :class:`~plugins.api.ContextSink` behind the agent calls.

    Values reach it already checked (JSON, sizes). Errors of the rail (an unknown pipeline, a
    refused write) propagate to the executor as :mod:`tracker_client.errors` exceptions.
    """

    async def store_get(self, namespace: str, key: str) -> Any:
        """The value under ``namespace``/``key``, or None when absent."""

    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """Upsert a JSON value."""

    async def store_delete(self, namespace: str, key: str) -> None:
        """Delete a key (absent is fine)."""

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """Every entry of a namespace, sorted by key."""

    async def store_search(
        self, query: str, *, namespace: str | None, limit: int
    ) -> list[StoreEntry]:
        """The rail's full-text search, best first."""

    async def spawn(self, pipeline: str, fields: Mapping[str, Any]) -> str:
        """Create a child task of this run's task in ``pipeline`` (name or id); its id.
        ``fields``: the task's ``title``, ``description``, ``metadata``, ``priority`` and any
        other task option."""

    async def save_checkpoint(self, data: Any) -> None:
        """Keep ``data`` as this run's checkpoint (the sink paces the writes; latest wins)."""

    async def read_upstream(self) -> list[Upstream]:
        """Each dependency of this run's task, as it ended."""


def json_value(value: Any, what: str) -> str:
    """``value`` as compact JSON; ``ValueError`` naming ``what`` and the offending type."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{what}: the value is not JSON ({type(value).__name__}: {exc}); nothing written"
        ) from exc


def checkpoint_json(data: Any) -> str:
    """``data`` as compact JSON, checked against the 64 KiB limit (``ValueError`` naming it)."""
    text = json_value(data, "checkpoint")
    size = len(text.encode())
    if size > MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"checkpoint is too large: {size} bytes of JSON, limit {MAX_CHECKPOINT_BYTES} bytes "
            "(64 KiB); nothing written (keep results in events and artifacts)"
        )
    return text


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


class Store:
    """``ctx.store``: the rail's namespaced KV store with full-text search, as shared memory.

    Values are JSON (anything ``json.dumps`` takes). Reads and writes use the worker's
    credentials; nothing reaches a child process.
    """

    def __init__(self, sink: object) -> None:
        self._sink = sink
        self._agent_sink: AgentSink | None = None

    def _agent(self, call: str) -> AgentSink:
        if self._agent_sink is not None:
            return self._agent_sink
        sink = self._sink
        if not isinstance(sink, AgentSink):
            raise AgentUnsupported(
                f"ctx.{call}: this context's sink ({type(sink).__name__}) has no agent "
                "operations (the worker's and plugins.testing's have)"
            )
        self._agent_sink = sink
        return sink

    async def get(self, namespace: str, key: str) -> Any:
        """The value, or None when the key is absent."""
        return await self._agent("store.get").store_get(
            _name(namespace, "namespace"), _name(key, "key")
        )

    async def put(self, namespace: str, key: str, value: Any) -> None:
        """Store a JSON value (``ValueError`` naming the key and type otherwise: nothing
        written)."""
        json_value(value, f"store.put {namespace!r}/{key!r}")
        await self._agent("store.put").store_put(
            _name(namespace, "namespace"), _name(key, "key"), value
        )

    async def delete(self, namespace: str, key: str) -> None:
        """Delete a key (absent is fine)."""
        await self._agent("store.delete").store_delete(
            _name(namespace, "namespace"), _name(key, "key")
        )

    async def list(self, namespace: str) -> list[StoreEntry]:
        """Every entry of the namespace (``.key``, ``.value``), sorted by key."""
        return await self._agent("store.list").store_list(_name(namespace, "namespace"))

    async def search(
        self, query: str, *, namespace: str | None = None, limit: int = 10
    ) -> _Entries:
        """Full-text search (every word must match), best first, at most ``limit``."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"store.search: limit must be a positive integer, got {limit!r}")
        if namespace is not None:
            _name(namespace, "namespace")
        return await self._agent("store.search").store_search(
            _name(query, "query"), namespace=namespace, limit=limit
        )
