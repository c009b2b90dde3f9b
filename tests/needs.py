"""What a test needs from outside the clone, and what happens when it is not there.

A bare clone with nothing beside it must pass the README's test command, so a test that needs
something the clone does not hold (a sibling checkout, a binary such as chromium,
``systemd-analyze``, PostgreSQL's server, ``openssl``, ``curl``) SKIPS with the reason there.
In CI (``CI=true``, which ``.ci/run`` sets) the same test must run: the missing thing FAILS it,
naming what to install. Every such test goes through this module, so the rule is one rule.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["in_ci", "mark_needs", "missing", "require_module", "require_path", "require_tool"]


def in_ci() -> bool:
    """Whether this run is CI's (``CI`` is ``true``, ``1`` or ``yes``; ``CI=false`` is not)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(reason: str) -> NoReturn:
    """Skip the test, giving ``reason``; in CI fail it instead (CI must run it)."""
    if in_ci():
        pytest.fail(f"CI must run this test, but {reason}", pytrace=False)
    pytest.skip(reason)


def require_path(path: Path, reason: str) -> Path:
    """``path`` if it exists, else :func:`missing` (``reason`` says what it is and where from)."""
    if not path.exists():
        missing(f"{reason}: {path} does not exist")
    return path


def require_tool(name: str, hint: str) -> str:
    """The full path of the program ``name`` on ``PATH``, else :func:`missing` with ``hint``
    (how to install it)."""
    found = shutil.which(name)
    if found is None:
        missing(f"{name} is not installed ({hint})")
    return found


def require_module(name: str, hint: str) -> ModuleType:
    """The Python module ``name``, else :func:`missing` with ``hint`` (how to install it)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"Python module {name} is not importable ({exc}; {hint})")


def mark_needs(present: bool, reason: str) -> pytest.MarkDecorator:
    """A ``skipif`` marker for a whole test or module: skipped when the thing is not
    ``present``, except in CI, where the test runs and its own check of the thing fails it
    (pair it with :func:`require_path` or :func:`require_tool` in the test or its fixture)."""
    return pytest.mark.skipif(not present and not in_ci(), reason=reason)
