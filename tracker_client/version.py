"""The installed package's version, for what reports it: the MCP server's ``initialize``
answer, a worker's presence record and its metrics' ``info``."""

from __future__ import annotations

from importlib import metadata

__all__ = ["package_version"]


def package_version() -> str:
    """The installed backlog-worker's version (``unknown`` from a source tree that is not
    installed as a package)."""
    try:
        return metadata.version("backlog-worker")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree not installed
        return "unknown"
