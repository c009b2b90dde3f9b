"""Keeping the provider API key out of what a nullclaw run reports.

The key has to reach nullclaw (``NULLCLAW_API_KEY``), so the agent can see it: a shell tool
running ``env``, or a verbose diagnostic line, would put it in the output. Every text that leaves
the run (progress events, the answer artifact and ``result`` event, failure messages and
details) goes through :class:`Redactor` first.

Pure text: it touches nothing and imports nothing of the project, so the worker's own scrubber
(:mod:`worker.scrub`) reuses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["REDACTED", "Redactor"]

REDACTED = "[redacted]"
#: Values shorter than this are not treated as secrets (too likely to hit ordinary text).
_MIN_SECRET_CHARS = 6


class Redactor:
    """Replaces each secret value by ``[redacted]`` in texts and nested structures."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = sorted(
            {s for s in secrets if len(s) >= _MIN_SECRET_CHARS}, key=len, reverse=True
        )
        #: The longest secret's length minus one: how much text a stream must hold back so a
        #: secret split across two flushes is still caught.
        self.holdback = max((len(s) for s in self._secrets), default=1) - 1

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        """``value`` with every secret replaced."""
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def data(self, value: Any) -> Any:
        """Strings inside dicts/lists/tuples redacted (keys too); other values unchanged."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value
