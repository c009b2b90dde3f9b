"""Options of the ``python`` executor: the function to call, validated once per role.

``callable = "package.module:function"`` is the executor's main option (with
``max_abandoned_threads``, the cap on threads of cancelled runs still running); they are checked
by a pydantic model (the same tool and formatter as every other option table, see
:mod:`tracker_client.validation`) when the worker builds the executor. The role's other options
are not the executor's: they reach the function as ``ctx.options``, so they are let through
(``extra="ignore"``) instead of refused. Importing the function is
:func:`plugins.python.executor.import_callable`'s job; nothing here imports or touches files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tracker_client.errors import ExecutorError
from tracker_client.validation import describe_options, must

__all__ = ["PythonOptions", "parse_options", "split_callable"]


def split_callable(path: str) -> tuple[str, str]:
    """``"package.module:attr.attr"`` -> (module, attributes); ValueError when malformed."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"must look like 'package.module:function', got {path!r}")
    return module_name, attr


class PythonOptions(BaseModel):
    """The ``python`` executor's own option (others belong to the function)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    #: ``"package.module:function"`` (dotted attributes allowed after the colon).
    callable: Annotated[
        str, Field(min_length=1), must("is required: 'package.module:function'")
    ] = Field("", validate_default=True)

    #: Threads of cancelled runs (a plain ``def`` that ignores ``ctx.cancelled``) that may still
    #: run before the worker stops claiming for the role (see :mod:`plugins.python.sync`).
    max_abandoned_threads: int = Field(8, ge=1, le=10_000)

    @field_validator("callable")
    @classmethod
    def _shape(cls, path: str) -> str:
        split_callable(path)
        return path


def parse_options(options: Mapping[str, Any]) -> PythonOptions:
    """Validate a role's options; :class:`ExecutorError` names the option that is wrong."""
    try:
        return PythonOptions.model_validate(dict(options))
    except ValidationError as exc:
        raise ExecutorError(describe_options(exc, PythonOptions, label="python option")) from None
