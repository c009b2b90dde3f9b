"""Known secrets scrubbed from everything a run writes to the tracker.

An executor's output is not under the worker's control: a child that prints its environment, a
token it found, or the worker's own ``/proc/<pid>/environ`` would put secrets in events, artifact
metadata, the fail error or a transition's instructions, where anyone with read access to the
rail sees them. So every such write goes through the run's :class:`RunScrubber`, which masks (by
exact value, as the log's redaction does; :class:`plugins.proc.redact.Redactor` does the
walking, the same masking an executor applies to the secrets it hands its own children):

* the secrets registered with the log (:func:`worker.logs.registered_secrets`: the api token);
* the run's own lease token;
* the values of the worker's environment variables whose names say they are secrets (tracker
  tokens, ``*API_KEY*``, ``*SECRET*``, ``*PASSWORD*``: e.g. a provider key for nullclaw).

Token-shaped patterns (64 hex digits) are not masked here, unlike in the log: a sha256 in an
executor's output or an artifact is data, not a secret. Values shorter than 6 characters are
never treated as secrets.

This module is the one home of the worker's redaction: which secrets it knows, and the run's
redactor every write under a lease goes through (:mod:`worker.lease.session`).

It may touch the worker's environment (read: the secret-named variables), the log's registered
secrets and :mod:`plugins.proc.redact`'s walker; it writes nothing itself.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping

from plugins.proc.env import SECRET_ENV_PATTERNS
from plugins.proc.redact import Redactor
from worker.logs import registered_secrets

__all__ = ["RunScrubber", "env_secrets", "known_secrets", "refresh"]

#: Environment names (upper case, fnmatch) whose values are secrets, besides tracker tokens.
SECRET_ENV_NAMES: tuple[str, ...] = ("*API_KEY*", "*SECRET*", "*PASSWORD*", "*_TOKEN")
_SECRET_NAME = re.compile(
    "|".join(fnmatch.translate(p) for p in (*SECRET_ENV_PATTERNS, *SECRET_ENV_NAMES))
)

_shared: tuple[tuple[str, ...], tuple[str, ...]] | None = None


def env_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Values of the environment variables named like secrets (see the module doc)."""
    env = os.environ if environ is None else environ
    return tuple(v for n, v in env.items() if v and _SECRET_NAME.match(n.upper()))


def known_secrets() -> tuple[str, ...]:
    """The registered secrets and the secret environment values (the environment is read
    once, and again after :func:`refresh` or when a secret is registered)."""
    global _shared
    registered = registered_secrets()
    if _shared is None or _shared[0] != registered:
        _shared = (registered, (*registered, *env_secrets()))
    return _shared[1]


def refresh() -> None:
    """Read the environment again at the next scrub (after it changed)."""
    global _shared
    _shared = None


class RunScrubber:
    """The redactor of one run: the known secrets plus the run's own lease token."""

    def __init__(self, lease_token: str) -> None:
        """Mask ``lease_token`` too."""
        self._token = lease_token
        self._base: tuple[str, ...] | None = None
        self._redactor = Redactor(())

    def get(self) -> Redactor:
        """The redactor for the secrets known now (built once per run unless they change)."""
        base = known_secrets()
        if base is not self._base:
            self._base = base
            self._redactor = Redactor([*base, self._token])
        return self._redactor
