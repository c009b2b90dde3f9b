"""Known secret values masked in text and nested data: ``[redacted]`` in their place.

Whoever hands a secret to something it does not control keeps it out of what comes back: the
worker masks the secrets it knows (:mod:`worker.scrub`: its tokens, the secret-named variables of
its environment) in everything a run writes to the rail, and an executor that passes a child its
own secrets (the ``nullclaw`` executor's provider key and passed-through tokens) masks them in
what the child prints before it reaches a report, a file or a log line. Both build a
:class:`Redactor` from exact values; which values are secret is each one's own policy.

Values shorter than 6 characters are never treated as secrets (too likely to hit ordinary
text). Pure text: it touches nothing and imports nothing of the project.
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
        """Mask each of ``secrets`` (by exact value; the longest first, so a secret that
        contains another is masked whole)."""
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
