"""The ``nullclaw`` executor's MCP offer: the rail's MCP server in the agent's config, bound to
the task (option ``mcp``, off by default; docs/submit/mcp.md#nullclaw).

NullClaw starts the stdio MCP servers its ``config.json`` lists under ``mcp_servers``
(``{"name": {"command": ..., "args": [...]}}``) and gives the agent their tools. With
``mcp = {tracker = "...", token_file = "..."}`` on a role, each run's generated config lists
``backlog-worker mcp --task <task id>`` (this Python, ``-m worker``), so the agent can submit
subtasks of the task it works (cancelled with it), wait for them, read their results and search
and write the shared store (its writes carry the task's id).

Nothing secret goes into the config or an argv: the rail's URL (a URL carrying a password is
refused: give ``tracker_file``) and the *path* of a token file, which the operator makes
(mode 0600, ideally a scoped ``producer`` token for the pipelines the agent may feed:
docs/operate/security.md#scoped-tokens). The worker's own api token never reaches nullclaw.

It builds option values and a config entry; :func:`offer_problems` (for ``backlog-worker
check``) reads the two files and looks whether the ``mcp`` extra is installed.
"""

from __future__ import annotations

import importlib.util
import re
import stat
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["McpOffer", "offer_problems", "server_entry"]

#: A libpq password parameter (``?password=``, ``sslpassword=``) in a URL's query.
_PASSWORD_PARAMETER = re.compile(r"(?i)(?:^|[?&;])(?:ssl)?password=")


def _has_password(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.password is not None or bool(_PASSWORD_PARAMETER.search(parts.query))
    except ValueError:  # not a URL we can read: it goes to the server, which says so
        return False


class McpOffer(BaseModel):
    """``mcp`` of a nullclaw role: which rail the agent's MCP server acts on, with which token."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The rail's URL (``sqlite:///...``, ``http://127.0.0.1:8080``, ``postgresql://...``
    #: without a password).
    tracker: str | None = Field(None, min_length=1)
    #: A file holding the rail's URL (for one carrying a password); absolute.
    tracker_file: Path | None = None
    #: A file holding the api token the server acts with (absolute; 0600; a scoped producer
    #: token where the rail is served). None: no token (an embedded rail).
    token_file: Path | None = None
    #: The server's name in nullclaw's config (its tools are ``mcp_<name>_<tool>``).
    name: str = Field("rail", pattern=r"^[A-Za-z0-9_-]{1,32}$")

    @model_validator(mode="after")
    def _coherent(self) -> McpOffer:
        if (self.tracker is None) == (self.tracker_file is None):
            raise ValueError(
                "'mcp' needs exactly one of 'tracker' (the rail's URL) and 'tracker_file'"
            )
        if self.tracker is not None and _has_password(self.tracker):
            raise ValueError(
                "'mcp.tracker' carries a password, which would sit in nullclaw's config and "
                "argv: put the URL in a file and give 'tracker_file'"
            )
        for label, path in (("tracker_file", self.tracker_file), ("token_file", self.token_file)):
            if path is not None and not path.is_absolute():
                raise ValueError(f"'mcp.{label}' must be an absolute path, got {str(path)!r}")
        return self


def server_entry(offer: McpOffer, task_id: str) -> dict[str, Any]:
    """The ``mcp_servers`` entry (``{name: {"command", "args"}}``) of one run's config: the
    rail's MCP server bound to ``task_id``, started with the worker's own Python."""
    args = ["-m", "worker", "mcp", "--task", task_id]
    if offer.tracker is not None:
        args += ["--tracker", offer.tracker]
    else:
        args += ["--tracker-file", str(offer.tracker_file)]
    if offer.token_file is not None:
        args += ["--token-file", str(offer.token_file)]
    return {offer.name: {"command": sys.executable, "args": args}}


def offer_problems(offer: McpOffer) -> list[str]:
    """What would stop the offered server from starting, one line each (blocking file reads:
    call in a thread): the SDK missing, a file unreadable or empty, a token file others may
    read."""
    problems: list[str] = []
    if importlib.util.find_spec("mcp") is None:
        problems.append(
            "mcp: the rail's MCP server needs the mcp extra: pip install 'backlog-worker[mcp]'"
        )
    for label, path in (("tracker_file", offer.tracker_file), ("token_file", offer.token_file)):
        if path is None:
            continue
        try:
            if not path.read_text(encoding="utf-8").strip():
                problems.append(f"mcp.{label} {path} is empty")
            elif label == "token_file" and path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                problems.append(f"mcp.token_file {path} is readable by other users: chmod 600")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"mcp.{label} {path} cannot be read: {exc}")
    return problems
