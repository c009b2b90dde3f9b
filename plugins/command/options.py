"""Options of the ``command`` executor: one validated, frozen object per role.

A role's ``[roles.options]`` table arrives as a plain mapping; :func:`parse_options` checks it
once, when the worker builds the executor (pydantic, ``extra="forbid"``, the one formatter of
:mod:`tracker_client.validation`), and raises :class:`~tracker_client.errors.ExecutorError`
naming the option (``command option 'argv' must be a non-empty list of strings``). The
placeholders of ``argv``, ``env`` and ``cwd`` are parsed here too, so a typo in one is named
before any task runs (:mod:`plugins.command.template`). Nothing here touches the file system
beyond reading the worker's current directory (relative paths are the worker's).

Options (see docs/executors/command.md and :mod:`plugins.command.executor`)::

    argv = ["./review.sh", "{task.id}", "--title", "{task.title}"]   # required, never a shell;
                                           # a relative program path is the worker's, not workdir's
    env = { MODE = "ci", TICKET = "{task.metadata[ticket]}" }        # extra variables
    env_passthrough = ["HOME", "LC_*"]     # worker variables the child may see (tokens never)
    stdin = "none"                         # or "task_json": the task JSON on stdin
    task_file = true                       # write the task JSON to <workdir>/task.json
    exit_codes = { "0" = "complete", "3" = "reject" }   # "" = the role's default trigger
    retryable_exit_codes = [75]            # when given, other unmapped codes are not retried
    timeout_s = 600.0                      # none by default (the worker's task timeout applies)
    term_grace_s = 5.0                     # SIGTERM -> SIGKILL delay for the process group
    tail_bytes = 4096                      # stdout/stderr tail kept in events and failures
    stream_output = true                   # output chunks as "output" events while it runs
    stream_limit_bytes = 65536             # per stream; the rest is only in the tail
    cwd = "/srv/repo"                      # default: the run's working directory (templated;
                                           # relative = the worker's directory)
    artifacts_dir = "/srv/artifacts"       # outcome.json artifacts are copied here first;
                                           # default: a directory that outlives the run
                                           # ($STATE_DIRECTORY/artifacts under systemd, else
                                           # ~/.local/share/backlog-worker/artifacts); false:
                                           # left in the run's directory (gone after the run
                                           # unless keep_workdirs)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from plugins.artifact_files import default_artifacts_dir
from plugins.command.template import Template
from tracker_client.errors import ExecutorError
from tracker_client.validation import describe_options, must

__all__ = ["CommandOptions", "parse_options"]

_Positive = Annotated[float, Field(gt=0, strict=True)]
_Count = Annotated[int, Field(ge=0, strict=True)]
_Flag = Annotated[bool, Field(strict=True), must("must be true or false")]
_NonEmpty = Annotated[str, Field(min_length=1)]
_PathText = Annotated[_NonEmpty | None, must("must be a non-empty path string")]


#: The default ``exit_codes``: 0 is success, the trigger the worker's choice.
_SUCCESS_ONLY: dict[int, str | None] = {0: None}


def _exit_code(key: Any) -> int:
    try:
        code = int(key)
    except (TypeError, ValueError):
        code = -1
    if isinstance(key, bool) or not 0 <= code <= 255:
        raise ValueError(f"{key!r} is not an exit code (0..255)")
    return code


class CommandOptions(BaseModel):
    """The validated options of a :class:`~plugins.command.executor.CommandExecutor` (see the
    module docstring), with their templates parsed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: Annotated[
        tuple[str, ...], Field(min_length=1), must("must be a non-empty list of strings")
    ] = Field((), validate_default=True)
    env: Annotated[dict[str, str], must("must be a table of strings")] = Field(default_factory=dict)
    env_passthrough: Annotated[tuple[_NonEmpty, ...], must("must be a list of names")] = ()
    stdin: Annotated[Literal["none", "task_json"], must("must be 'none' or 'task_json'")] = "none"
    task_file: _Flag = True
    #: Exit code -> trigger (None: the role's default trigger).
    exit_codes: dict[int, str | None] = Field(default_factory=lambda: _SUCCESS_ONLY.copy())
    #: None: every unmapped code is retried.
    retryable_exit_codes: frozenset[int] | None = None
    timeout_s: Annotated[_Positive | None, must("must be a positive number")] = None
    term_grace_s: Annotated[_Positive, must("must be a positive number")] = 5.0
    tail_bytes: Annotated[_Count, must("must be an integer >= 0")] = 4096
    stream_output: _Flag = True
    stream_limit_bytes: Annotated[_Count, must("must be an integer >= 0")] = 65_536
    cwd: _PathText = None
    #: None: :func:`~plugins.artifact_files.default_artifacts_dir`; False: not copied.
    artifacts_dir: Annotated[
        _NonEmpty | Literal[False] | None,
        must("must be a non-empty path string, or false (left in the run's directory)"),
    ] = None

    _argv: tuple[Template, ...] = PrivateAttr(())
    _env: dict[str, Template] = PrivateAttr(default_factory=dict)
    _cwd: Template | None = PrivateAttr(None)
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _default_artifacts: Path = PrivateAttr(default_factory=lambda: default_artifacts_dir()[0])

    @field_validator("argv")
    @classmethod
    def _program(cls, argv: tuple[str, ...]) -> tuple[str, ...]:
        if not argv[0]:
            raise ValueError("the program (argv[0]) is empty")
        program = argv[0]
        if os.sep in program and "{" not in program and not os.path.isabs(program):
            # the child starts in its workdir: "./tool" means the worker's ./tool
            program = os.path.abspath(program).replace("{", "{{").replace("}", "}}")
        return (program, *argv[1:])

    @field_validator("exit_codes", mode="before")
    @classmethod
    def _exit_codes(cls, table: Any) -> dict[int, str | None]:
        if not isinstance(table, Mapping) or not table:
            raise ValueError("must be a non-empty table")
        codes: dict[int, str | None] = {}
        for key, trigger in table.items():
            code = _exit_code(key)
            if trigger is not None and not isinstance(trigger, str):
                raise ValueError(f"the trigger of {key!r} must be a string")
            codes[code] = trigger or None
        return codes

    @field_validator("retryable_exit_codes", mode="before")
    @classmethod
    def _retryable(cls, codes: Any) -> frozenset[int] | None:
        if codes is None:
            return None
        if not isinstance(codes, list | tuple):
            raise ValueError("must be a list of codes")
        return frozenset(_exit_code(c) for c in codes)

    @field_validator("term_grace_s", mode="before")
    @classmethod
    def _grace(cls, value: Any) -> Any:
        return 5.0 if value is None else value

    @model_validator(mode="after")
    def _templates(self) -> CommandOptions:
        # Template.parse raises ExecutorError naming the option and the placeholder; it is not a
        # ValueError, so it leaves pydantic as it is.
        self._argv = tuple(Template.parse(a, f"argv[{i}]") for i, a in enumerate(self.argv))
        self._env = {k: Template.parse(v, f"env.{k}") for k, v in self.env.items()}
        self._cwd = None if self.cwd is None else Template.parse(self.cwd, "cwd")
        if not self.task_file:
            for template in [*self._argv, *self._env.values()]:
                if "task_file" in template.fields:
                    raise ExecutorError(
                        f"command option {template.where!r} uses {{task_file}} "
                        "but 'task_file' is false"
                    )
        return self

    @property
    def argv_templates(self) -> tuple[Template, ...]:
        """``argv``, parsed (argv[0] made absolute when it is a relative path)."""
        return self._argv

    @property
    def env_templates(self) -> dict[str, Template]:
        """``env``, parsed."""
        return self._env

    @property
    def cwd_template(self) -> Template | None:
        """``cwd``, parsed (None: the run's working directory)."""
        return self._cwd

    @property
    def uses_store(self) -> bool:
        """Whether a template names ``{store.ns.key}`` (read from the rail before each run)."""
        templates = [*self._argv, *self._env.values(), *([self._cwd] if self._cwd else [])]
        return any(f.startswith("store.") for t in templates for f in t.fields)

    @property
    def base_dir(self) -> Path:
        """The worker's directory when the options were read: relative paths (program, cwd)
        are resolved against it."""
        return self._base_dir

    @property
    def artifacts_path(self) -> Path | None:
        """Where ``outcome.json`` artifacts are copied: ``artifacts_dir`` as an absolute path,
        the default (read when the options were) when unset, None when false (not copied)."""
        if self.artifacts_dir is False:
            return None
        if self.artifacts_dir is None:
            return self._default_artifacts
        return self._base_dir / self.artifacts_dir

    @property
    def stdin_task_json(self) -> bool:
        """The task JSON goes to the child's stdin."""
        return self.stdin == "task_json"


def parse_options(options: Mapping[str, Any]) -> CommandOptions:
    """Validate a role's options; :class:`ExecutorError` names the option that is wrong."""
    try:
        return CommandOptions.model_validate(dict(options))
    except ValidationError as exc:
        problem = describe_options(
            exc, CommandOptions, label="command option", unknown_label="command option(s)"
        )
        raise ExecutorError(problem) from None
