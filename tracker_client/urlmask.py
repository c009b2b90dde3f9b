"""Passwords out of tracker URLs before they are shown: the one function every message, log line
and report that names a rail goes through (docs/operate/security.md).

A PostgreSQL rail's URL may carry its password as ``user:password@host`` or as a
``?password=`` (``sslpassword=``) parameter, and libpq's conninfo form as ``password=...``;
each is replaced by ``***``. It works on any text (an error message may quote the URL, or
psycopg's conninfo), so a caller never needs to find the URL first.

Pure: it may touch the text it is given only.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "mask_url"]

#: What a password is replaced with.
MASK = "***"

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/@:?#]*:)([^\s/@?#]*)(@)")
_PARAMETER = re.compile(r"(?i)((?:^|[?&;\s'\"])(?:ssl)?password\s*=\s*)('[^']*'|[^\s&'\"#]*)")


def mask_url(text: str) -> str:
    """``text`` (a URL, a conninfo or a message quoting them) with every password masked."""
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", text)
    return _PARAMETER.sub(lambda m: f"{m.group(1)}{MASK}", text)
