"""Options of the ``nullclaw`` executor: one validated, frozen object per role.

A role's ``[roles.options]`` table arrives as a plain mapping; :func:`parse_options` checks it
once, when the worker builds the executor, and raises
:class:`~tracker_client.errors.ExecutorError` naming the option that is wrong. Nothing here
touches the file system or the environment beyond reading a ``prompt_template_file``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from plugins.nullclaw.mcp import McpOffer
from plugins.nullclaw.memory import MemoryOptions
from tracker_client.errors import ExecutorError
from tracker_client.validation import describe_options

__all__ = [
    "DEFAULT_RETRYABLE_ERRORS",
    "FORBIDDEN_ENV_PREFIXES",
    "MAX_ARG_STRLEN",
    "NullClawOptions",
    "load_template",
    "parse_options",
]

#: Linux's limit on one argv string (``MAX_ARG_STRLEN`` = 32 pages), NUL included.
MAX_ARG_STRLEN = 131_072

#: ``error: <Name>`` values of an rc 1 run that are worth another attempt (provider trouble).
DEFAULT_RETRYABLE_ERRORS = ("RateLimited", "AllProvidersFailed", "CurlFailed")

#: Environment names never handed to nullclaw: the worker's own settings and tracker tokens.
FORBIDDEN_ENV_PREFIXES = ("BACKLOG_WORKER_", "NULLTICKETS_")
#: Names the executor sets itself; passing them through would be overwritten or confusing.
_RESERVED_ENV = frozenset({"HOME", "NULLCLAW_WORKSPACE", "NULLCLAW_API_KEY"})
_ENV_NAME = re.compile(r"[A-Za-z_*?\[][A-Za-z0-9_*?\[\]!-]*")
#: Names a passthrough pattern must not be able to match.
_PROBES = ("BACKLOG_WORKER_API_TOKEN", "NULLTICKETS_API_TOKEN", "BACKLOG_WORKER_TRACKER__URL")
#: Options that only go into a generated config.json (meaningless with an existing ``home``).
_GENERATED_ONLY = (
    "base_url",
    "provider_retries",
    "provider_backoff_ms",
    "message_timeout_s",
    "config",
)
_SECRETISH = re.compile(r"(TRACKER|LEASE)", re.IGNORECASE)


class NullClawOptions(BaseModel):
    """Every option of a ``nullclaw`` role, with its default (docs/executors/nullclaw.md).

    Config: either generated (``provider`` + ``model`` [+ ``base_url``, ``api_key_env``,
    ``provider_retries``, ...]) into a private HOME per run, or an existing ``home`` whose
    ``.nullclaw/config.json`` is used as is (``provider``/``model``/``temperature`` then become
    command-line overrides).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    binary: str = Field("nullclaw", min_length=1)
    provider: str | None = Field(None, min_length=1)
    model: str | None = Field(None, min_length=1)
    base_url: str | None = Field(None, min_length=1)
    #: Name of the worker's environment variable holding the provider API key. The value is
    #: given to nullclaw as ``NULLCLAW_API_KEY``; it is never written to disk.
    api_key_env: str | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    provider_retries: int | None = Field(None, ge=0, le=100)
    provider_backoff_ms: int | None = Field(None, ge=0)
    message_timeout_s: int | None = Field(None, gt=0)
    #: Extra keys deep-merged into the generated config.json (autonomy, diagnostics, ...).
    config: dict[str, Any] = Field(default_factory=dict)
    #: An existing HOME holding ``.nullclaw/config.json``; set it to use that config unchanged.
    home: Path | None = None

    prompt_template: str | None = None
    prompt_template_file: Path | None = None
    #: Prompts whose UTF-8 size exceeds this go through a file (or fail, see oversized_prompt);
    #: 0 (the default): every prompt does, so no prompt is visible in ``ps`` (argv).
    max_prompt_arg_bytes: int = Field(0, ge=0, le=MAX_ARG_STRLEN - 1)
    oversized_prompt: Literal["file", "fail"] = "file"

    timeout_s: float = Field(1800.0, gt=0)
    kill_grace_s: float = Field(5.0, ge=0)
    workspace: Literal["run", "task", "shared"] = "run"
    workspace_dir: Path | None = None
    #: Where answers are saved (``<answers_dir>/<task id>/answer-<run id>.md``); None = in the
    #: workspace's ``.backlog-worker/``. Set it with ``workspace = "run"`` when the worker
    #: deletes run directories (the default), so the artifact's file outlives the run.
    answers_dir: Path | None = None
    env_passthrough: tuple[str, ...] = ()
    max_output_bytes: int = Field(1 << 20, ge=1024)

    #: Verdict word -> trigger, for reviewer roles: the answer's last line naming a verdict wins.
    triggers: dict[str, str] = Field(default_factory=dict)
    #: Trigger used when ``triggers`` is set but the answer names no verdict (None = failure).
    verdict_fallback_trigger: str | None = None
    retryable_errors: tuple[str, ...] = DEFAULT_RETRYABLE_ERRORS

    progress_interval_s: float = Field(2.0, gt=0)
    progress_chunk_bytes: int = Field(8192, ge=256)
    progress_max_bytes: int = Field(256 * 1024, ge=0)
    progress_stderr: bool = True
    result_head_chars: int = Field(4000, ge=0, le=100_000)
    version_timeout_s: float = Field(10.0, gt=0)
    #: readiness also runs ``nullclaw agent -m /help`` to let nullclaw check its config.
    config_probe: bool = True
    #: The rail's store as memory: searched into the prompt, the answer written back
    #: (:mod:`plugins.nullclaw.memory`); None = off.
    memory: MemoryOptions | None = None
    #: The rail's MCP server offered to the agent, bound to the task
    #: (:mod:`plugins.nullclaw.mcp`); None = off.
    mcp: McpOffer | None = None
    #: A failed or cut-off run's partial answer is checkpointed and handed to the next attempt.
    resume: bool = True

    @model_validator(mode="after")
    def _coherent(self) -> NullClawOptions:
        if 0 < self.max_prompt_arg_bytes < 1024:
            raise ValueError(
                f"'max_prompt_arg_bytes' must be 0 (every prompt through a file) or at least "
                f"1024, got {self.max_prompt_arg_bytes}"
            )
        if self.oversized_prompt == "fail" and not self.max_prompt_arg_bytes:
            raise ValueError(
                "'oversized_prompt = \"fail\"' needs 'max_prompt_arg_bytes' (the largest prompt "
                "to pass inline, e.g. 100000); with 0 every prompt goes through a file"
            )
        if self.home is None and (self.provider is None or self.model is None):
            raise ValueError(
                "set 'provider' and 'model' (to generate a private config) or 'home' "
                "(an existing HOME holding .nullclaw/config.json)"
            )
        if self.home is not None and not self.home.is_absolute():
            raise ValueError(f"'home' must be an absolute path, got {str(self.home)!r}")
        if self.home is not None and self.mcp is not None:
            raise ValueError(
                "'mcp' puts the rail's MCP server into a generated config; with 'home' set, "
                "list it under mcp_servers in that home's .nullclaw/config.json instead"
            )
        if self.home is not None:
            generated_only = [
                name for name in _GENERATED_ONLY if getattr(self, name) not in (None, {})
            ]
            if generated_only:
                raise ValueError(
                    f"{', '.join(repr(n) for n in generated_only)} only shape a generated config; "
                    "with 'home' set, edit that home's .nullclaw/config.json instead"
                )
        if self.provider == "openai" and self.base_url is not None:
            raise ValueError(
                "nullclaw's 'openai' provider ignores 'base_url' (requests would go to OpenAI); "
                'name an OpenAI-compatible server anything else, e.g. provider = "local"'
            )
        if self.provider is not None and "/" in self.provider:
            raise ValueError(f"'provider' must not contain '/': {self.provider!r}")
        if self.prompt_template is not None and self.prompt_template_file is not None:
            raise ValueError("set only one of 'prompt_template' and 'prompt_template_file'")
        if self.workspace in ("task", "shared"):
            if self.workspace_dir is None:
                raise ValueError(f"workspace = {self.workspace!r} needs 'workspace_dir'")
            if not self.workspace_dir.is_absolute():
                raise ValueError(
                    f"'workspace_dir' must be an absolute path, got {str(self.workspace_dir)!r}"
                )
        if self.answers_dir is not None and not self.answers_dir.is_absolute():
            raise ValueError(
                f"'answers_dir' must be an absolute path, got {str(self.answers_dir)!r}"
            )
        for name in (*self.env_passthrough, *([self.api_key_env] if self.api_key_env else [])):
            _check_env_name(name)
        if self.verdict_fallback_trigger is not None and not self.triggers:
            raise ValueError("'verdict_fallback_trigger' needs 'triggers'")
        for word, trigger in self.triggers.items():
            if not word.strip() or not trigger.strip():
                raise ValueError(f"'triggers' entry {word!r} = {trigger!r} has an empty side")
        return self


def _check_env_name(name: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(f"environment variable name {name!r} is not valid")
    if any(ch in name for ch in "*?["):
        # a pattern (fnmatch, as proc.process.minimal_env reads it) must not reach our settings
        if any(fnmatch.fnmatchcase(probe, name) for probe in _PROBES):
            raise ValueError(
                f"environment pattern {name!r} would also pass the worker's own settings and "
                "tokens; list the variables nullclaw needs"
            )
        return
    upper = name.upper()
    if upper.startswith(FORBIDDEN_ENV_PREFIXES) or _SECRETISH.search(name):
        raise ValueError(
            f"environment variable {name!r} looks like a worker/tracker setting or token; "
            "it is never passed to nullclaw"
        )
    if upper in _RESERVED_ENV:
        raise ValueError(f"environment variable {name!r} is set by the executor itself")


def parse_options(options: Mapping[str, Any]) -> NullClawOptions:
    """Validate a role's options; :class:`ExecutorError` names what is wrong."""
    try:
        parsed = NullClawOptions.model_validate(dict(options))
    except ValidationError as exc:
        raise ExecutorError(f"nullclaw executor: {describe_options(exc, NullClawOptions)}") from exc
    return parsed


def load_template(options: NullClawOptions) -> str | None:
    """The configured template text (inline or from its file), or None for the default."""
    if options.prompt_template_file is None:
        return options.prompt_template
    try:
        return options.prompt_template_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExecutorError(
            f"nullclaw executor: option 'prompt_template_file': cannot read "
            f"{str(options.prompt_template_file)!r}: {exc}"
        ) from exc
