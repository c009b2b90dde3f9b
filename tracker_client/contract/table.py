"""The NullTickets wire contract as data: every operation's method, path, auth, body and answer.

One table (:data:`OPERATIONS`) says, per operation, what NullTickets documents and what the
served tracker adds. Both sides are derived from it: the served tracker's routes, its auth
classes, its OpenAPI document, the extension list of ``GET /health`` and the writes that wake
long polls (:mod:`tracker_client.serve`), and the remote client's plain calls
(:mod:`tracker_client.nulltickets`). The error half of the contract is
:mod:`tracker_client.contract.wire_errors`.

Extensions (not in plain NullTickets) are marked twice: an operation that only the served
tracker has carries the name of its ``/health`` extension in :attr:`Operation.extension`; a
plain operation whose body or answer the served tracker extends lists the names in
:attr:`Operation.features`, and each extension body field carries ``"x-extension"`` in its JSON
schema (the models are in :mod:`tracker_client.contract.wire_models`; import them from there).
Extension fields are ignored by a plain server (it ignores unknown fields).

This module is the contract's one import path and holds the lookups over the table
(:func:`operation`, :func:`format_path`, :func:`match`); the row types are
:mod:`~tracker_client.contract.contract_types` and the rows
:mod:`~tracker_client.contract.operations`, both re-exported here. Pure data and small
helpers: it imports the models and nothing that talks.
"""

from __future__ import annotations

from functools import cache
from urllib.parse import unquote

from tracker_client.contract.contract_types import MAX_LEASE_TTL_MS, Auth, Operation, Query
from tracker_client.contract.extensions import CONNECTION_EXTENSIONS, EXTENSIONS
from tracker_client.contract.operations import OPERATIONS

__all__ = [
    "CONNECTION_EXTENSIONS",
    "EXTENSIONS",
    "MAX_LEASE_TTL_MS",
    "OPERATIONS",
    "Auth",
    "Operation",
    "Query",
    "format_path",
    "match",
    "operation",
]

_BY_NAME = {op.name: op for op in OPERATIONS}


def operation(name: str) -> Operation:
    """The operation called ``name`` (a ``Tracker`` method or route name); ``KeyError`` if none."""
    return _BY_NAME[name]


def format_path(op: Operation | str, **params: str) -> str:
    """``op``'s path (an operation or its name) with every parameter percent-quoted as one
    segment (``/`` as ``%2F``): :meth:`Operation.format`.

    A missing or unknown parameter raises ``KeyError``/``TypeError``: a path is never sent
    half-filled.
    """
    op = op if isinstance(op, Operation) else operation(op)
    return op.format(**params)


@cache
def _index() -> dict[tuple[str, int], list[tuple[Operation, tuple[str, ...]]]]:
    index: dict[tuple[str, int], list[tuple[Operation, tuple[str, ...]]]] = {}
    for op in OPERATIONS:
        segments = tuple(op.path.strip("/").split("/"))
        index.setdefault((op.method, len(segments)), []).append((op, segments))
    return index


def match(method: str, raw_path: str) -> tuple[Operation, dict[str, str]] | None:
    """The operation a request is for, and its path parameters (each segment percent-decoded on
    its own, so ``/store/ns/key%2F1`` is key ``key/1``); None for an unknown route.

    ``raw_path`` is the path as sent (no query); the first operation in table order wins. An
    empty segment (``/runs//events``, a trailing ``/``) matches nothing.
    """
    if not raw_path.startswith("/"):
        return None
    parts = raw_path[1:].split("/")
    for op, segments in _index().get((method, len(parts)), ()):
        params: dict[str, str] = {}
        for want, got in zip(segments, parts, strict=True):
            if want.startswith("{"):
                if not got:
                    break
                params[want[1:-1]] = unquote(got)
            elif want != got:
                break
        else:
            return op, params
    return None
