"""The PostgreSQL rail: the Tracker protocol on a schema of a PostgreSQL database.

Selected by ``postgresql://`` URLs (:mod:`tracker_client.factory`); needs the ``postgres`` extra
(psycopg 3 and psycopg-pool). Imported only when a URL names it: importing this package, or its
modules that need no driver (:mod:`.options`, :mod:`.copy` until a PostgreSQL side is opened),
never imports psycopg, so ``rail --help`` and ``rail copy`` between two SQLite files run without
the extra. :data:`POSTGRES` and :class:`PostgresTracker` load :mod:`.tracker` on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracker_client.postgres.tracker import POSTGRES, PostgresTracker

__all__ = ["POSTGRES", "PostgresTracker"]


def __getattr__(name: str) -> Any:
    """:data:`POSTGRES` and :class:`PostgresTracker`, imported from :mod:`.tracker` (and with
    it psycopg) when first asked for."""
    if name in __all__:
        return getattr(importlib.import_module("tracker_client.postgres.tracker"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
