"""Which of the values nullclaw is given are secrets, to keep out of what a nullclaw run reports.

The provider key has to reach nullclaw (``NULLCLAW_API_KEY``), and so does whatever the role's
``env_passthrough`` lets through (a ``GITHUB_TOKEN`` for the agent's ``git``): the agent can see
them, and a shell tool running ``env``, or a verbose diagnostic line, would put them in the
output. Every text that leaves the run (progress events, the answer artifact and ``result``
event, failure messages and details, and so the log lines made of them) goes through a
:class:`plugins.proc.redact.Redactor` first, built from :func:`run_secrets`: the key, every
passed-through value whose name says it is a secret (``TOKEN``, ``KEY``, ``SECRET``,
``PASSWORD``, ``CREDENTIAL``, ``AUTH``, ``PAT``, ...), and every passed-through value shaped like
a credential whatever its name (16 or more characters, no blank, not a path, letters and digits
mixed). Other values (``TZ``, a path) are left alone: masking them would mangle ordinary output.

The masking itself is :mod:`plugins.proc.redact`'s, shared with the worker's own scrubbing of
everything a run writes (:mod:`worker.scrub`); this module holds nullclaw's policy only. Pure
text: it touches nothing and imports nothing of the project.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

__all__ = ["run_secrets"]

#: A name part that says the value is a secret (split on ``_``, ``-`` and ``.``; upper case).
_SECRET_WORDS = frozenset(
    {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "CREDENTIAL",
     "CREDENTIALS", "AUTH", "PAT", "PRIVATE", "COOKIE", "SESSION", "DSN", "SIGNATURE"}
)  # fmt: skip
#: A value shaped like a credential whatever its name: long, no blank, letters and digits mixed.
_TOKEN_SHAPED = re.compile(r"(?![/~.])(?=.*[A-Za-z])(?=.*[0-9])[!-~]{16,}")


def _secret_name(name: str) -> bool:
    return any(part in _SECRET_WORDS for part in re.split(r"[_.-]+", name.upper()))


def run_secrets(env: Mapping[str, str], passthrough: Iterable[str]) -> list[str]:
    """The values of ``env`` (a child's environment) to mask in what the run reports: the
    provider key (``NULLCLAW_API_KEY``) and the passed-through values (names or fnmatch patterns
    of ``passthrough``) that look secret by name or by shape (see the module docstring)."""
    patterns = tuple(passthrough)
    found = [env["NULLCLAW_API_KEY"]] if env.get("NULLCLAW_API_KEY") else []
    for name, value in env.items():
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        if _secret_name(name) or _TOKEN_SHAPED.fullmatch(value):
            found.append(value)
    return found
