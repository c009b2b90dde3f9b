"""Each run's cancel scope, made without looking anyio's backend up for every one.

``anyio.CancelScope()`` finds the running backend first (sniffio's look at the current task,
then anyio's table of backends) and then makes the backend's own scope class: most of the 2-4
us a scope costs to make, paid once per run (docs/benchmarks.md). A :class:`ScopeMaker` looks
the backend up once, at the first scope it makes (in the running event loop, so a worker on
trio gets trio's), and makes every later one from that class, as anyio's own
``create_cancel_scope`` does: the same object, an :class:`anyio.CancelScope` in every respect.

It touches anyio's cancel scopes only.
"""

from __future__ import annotations

import anyio

__all__ = ["ScopeMaker"]


class ScopeMaker:
    """Makes new, unentered cancel scopes of the running backend (see the module docstring).
    One per worker: the backend it learns is the one its first scope was made under."""

    __slots__ = ("_kind",)

    def __init__(self) -> None:
        self._kind: type[anyio.CancelScope] | None = None

    def __call__(self, *, shield: bool = False) -> anyio.CancelScope:
        """A new cancel scope (no deadline; ``shield`` as ``anyio.CancelScope``'s)."""
        kind = self._kind
        if kind is None:
            scope = anyio.CancelScope(shield=shield)
            self._kind = type(scope)
            return scope
        return kind(shield=shield)
