"""The KV store calls of the remote client, as :class:`StoreCalls`, a base of
:class:`~tracker_client.nulltickets.client.RemoteTracker`.

``PUT``/``GET``/``DELETE /store/{namespace}/{key}``, a namespace's list and delete, and the full
text search: plain rows of the contract table sent by the client's :class:`~.wire.Wire`, with
no quirk but the value checked to be JSON before it is sent. A part of the ``Tracker`` of its
own (agents keep notes there; no task or lease is involved). May touch: the wire only.
"""

from __future__ import annotations

from typing import Any

from tracker_client.models import StoreEntry
from tracker_client.nulltickets.codec import check_json
from tracker_client.nulltickets.wire import Wire

__all__ = ["StoreCalls"]


class StoreCalls:
    """The KV store operations of the remote client (over its ``_wire``)."""

    _wire: Wire

    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """``PUT /store/{namespace}/{key}`` (an upsert; no idempotency key needed)."""
        check_json(value, f"store value {namespace}/{key}")
        await self._wire.send("store_put", namespace, key, body={"value": value})

    async def store_get(self, namespace: str, key: str) -> StoreEntry:
        """``GET /store/{namespace}/{key}``."""
        return await self._wire.call("store_get", namespace, key, into=StoreEntry)

    async def store_delete(self, namespace: str, key: str) -> None:
        """``DELETE /store/{namespace}/{key}``."""
        await self._wire.send("store_delete", namespace, key)

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """``GET /store/{namespace}``."""
        return await self._wire.call("store_list", namespace, into=list[StoreEntry])

    async def store_delete_namespace(self, namespace: str) -> None:
        """``DELETE /store/{namespace}``."""
        await self._wire.send("store_delete_namespace", namespace)

    async def store_search(
        self,
        query: str,
        *,
        namespace: str | None = None,
        limit: int = 10,
        filter_path: str | None = None,
        filter_value: str | None = None,
    ) -> list[StoreEntry]:
        """``GET /store/search`` (full text)."""
        params = {
            "q": query,
            "namespace": namespace,
            "limit": limit,
            "filter_path": filter_path,
            "filter_value": filter_value,
        }
        return await self._wire.call("store_search", query=params, into=list[StoreEntry])
