"""Known secrets scrubbed from everything a run writes to the tracker.

An executor's output is not under the worker's control: a child that prints its environment, a
token it found, or the worker's own ``/proc/<pid>/environ`` would put secrets in events, artifact
metadata, the fail error or a transition's instructions, where anyone with read access to the
rail sees them. So every such write goes through :func:`scrubber` first, which masks (by exact
value, as the log's redaction does; :mod:`plugins.nullclaw_redact`'s :class:`Redactor` does the
walking):

* the secrets registered with the log (:func:`worker.logs.registered_secrets`: the api token);
* the lease token of every run this worker holds;
* the values of the worker's environment variables whose names say they are secrets (tracker
  tokens, ``*API_KEY*``, ``*SECRET*``, ``*PASSWORD*``: e.g. a provider key for nullclaw).

Token-shaped patterns (64 hex digits) are not masked here, unlike in the log: a sha256 in an
executor's output or an artifact is data, not a secret. Values shorter than 6 characters are
never treated as secrets.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping

from plugins.nullclaw_redact import Redactor
from plugins.proc_env import SECRET_ENV_PATTERNS
from worker.logs import registered_secrets

__all__ = ["env_secrets", "hold_secret", "release_secret", "scrubber"]

#: Environment names (upper case, fnmatch) whose values are secrets, besides tracker tokens.
SECRET_ENV_NAMES: tuple[str, ...] = ("*API_KEY*", "*SECRET*", "*PASSWORD*", "*_TOKEN")
_SECRET_NAME = re.compile(
    "|".join(fnmatch.translate(p) for p in (*SECRET_ENV_PATTERNS, *SECRET_ENV_NAMES))
)

_held: dict[str, int] = {}
_cache: tuple[tuple[object, ...], Redactor] | None = None


def env_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Values of the environment variables named like secrets (see the module doc)."""
    env = os.environ if environ is None else environ
    return tuple(v for n, v in env.items() if v and _SECRET_NAME.match(n.upper()))


def hold_secret(secret: str) -> None:
    """Mask ``secret`` (a lease token) in tracker writes until :func:`release_secret`."""
    _held[secret] = _held.get(secret, 0) + 1


def release_secret(secret: str) -> None:
    """Undo one :func:`hold_secret`."""
    count = _held.get(secret, 0) - 1
    if count > 0:
        _held[secret] = count
    else:
        _held.pop(secret, None)


def scrubber() -> Redactor:
    """The redactor for the secrets known now.

    Rebuilt when the registered secrets or the held lease tokens changed, so at every claim
    and run end; the environment is read at each rebuild (a scan per write would cost more
    than the write's scrub).
    """
    global _cache
    key = (registered_secrets(), tuple(_held))
    if _cache is None or _cache[0] != key:
        _cache = (key, Redactor([*key[0], *key[1], *env_secrets()]))
    return _cache[1]
