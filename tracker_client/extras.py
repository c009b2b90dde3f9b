"""The package's optional dependencies (its extras) and the error that names a missing one.

``pip install backlog-worker`` brings what every command needs; a feature that needs more
(the PostgreSQL rail, OpenTelemetry traces, the MCP server) imports it when it is used, never
at start-up, so ``backlog-worker --help`` and every command that does not use the feature run
without it (the extras: ``docs/getting-started/install.md``).
When the import fails,
:func:`missing` turns it into a :class:`~tracker_client.errors.ConfigError` that names the
module that is really missing: the extra to install when the module is one the extra brings,
the module itself when the extra is there and something beneath it is not (telling a user to
install an extra they already have sends them in a circle).

It imports nothing outside the standard library and :mod:`tracker_client.errors`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from tracker_client.errors import ConfigError

__all__ = ["EXTRAS", "missing", "require"]

#: The top-level modules each runtime extra brings (what its features import first).
EXTRAS: Mapping[str, tuple[str, ...]] = {
    "postgres": ("psycopg", "psycopg_pool"),
    "otel": ("opentelemetry",),
    "mcp": ("mcp",),
}


def missing(extra: str, feature: str, exc: ImportError) -> ConfigError:
    """The error for ``feature`` (what the user asked for, e.g. ``"tracker url postgresql://"``)
    whose import of the ``extra``'s modules failed with ``exc``.

    * the missing module is one the extra brings: install the extra;
    * another module is missing (a dependency of the extra's packages): name that module, and
      do not send the user to the extra they have;
    * no module is missing but the import failed (a name an older version lacks, a broken
      binary): upgrade the extra's packages.
    """
    install = f"pip install 'backlog-worker[{extra}]'"
    name = exc.name
    if not isinstance(exc, ModuleNotFoundError) or name is None:
        return ConfigError(
            f"{feature}: the {extra} extra's packages are installed but could not be "
            f"imported ({exc}); upgrade them: pip install --upgrade 'backlog-worker[{extra}]'"
        )
    if name.partition(".")[0] in EXTRAS[extra]:
        return ConfigError(
            f"{feature} needs the {extra} extra, which is not installed (no module "
            f"{name!r}): {install}"
        )
    return ConfigError(
        f"{feature}: Python module {name!r} is missing; the {extra} extra's packages are "
        f"installed but need it (pip install {name.partition('.')[0]})"
    )


def require(extra: str, feature: str) -> None:
    """Import the ``extra``'s modules, or raise :func:`missing`'s error for ``feature``."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing(extra, feature, exc) from exc
