"""The configuration reference: every key of the pydantic models a configuration file is
validated against (:class:`worker.config.models.ConfigFile` and its tables), with its type,
default, description, environment variable and command-line flag, so the page cannot drift from
what the loader accepts.

A key's description is its documentation comment, the ``#:`` lines above the field (or a
docstring under it), read from the model's source as Sphinx reads them. (pydantic's
``use_attribute_docstrings`` would put docstrings in ``FieldInfo.description``, but parses the
models' source at every import of the configuration: about 20 ms of every command's start, for
a text only these pages show.)"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import textwrap
import types
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .markdown import code, table, text


@dataclass(frozen=True)
class Key:
    """One configuration key."""

    #: ``()`` for the top level, ``("tracker",)``, ``("roles",)`` (an array of tables).
    table: tuple[str, ...]
    name: str
    field: FieldInfo
    #: The key's documentation (its ``#:`` comment or docstring).
    description: str
    #: The ``BACKLOG_WORKER_*`` variable that sets it alone (None: only inside its table's).
    env: str | None
    #: Other variables that set it (short forms).
    short_env: tuple[str, ...]
    flag: str | None

    @property
    def dotted(self) -> str:
        """``worker.concurrency``, ``roles[].name``, ``log_level``."""
        return (
            ".".join([*self.table, self.name])
            .replace("roles.", "roles[].")
            .replace("schedules.", "schedules[].")
        )


@cache
def _docstrings(cls: type) -> dict[str, str]:
    """Every field ``cls`` itself declares, with its documentation (empty: none)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    tree = ast.parse(source)
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    found = {}
    for stmt, after in itertools.pairwise([*body, ast.Pass()]):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                found[stmt.target.id] = inspect.cleandoc(str(after.value.value))
                continue
            comment: list[str] = []
            above = stmt.lineno - 2  # the line before the field's, 0-based
            while above >= 0 and lines[above].lstrip().startswith("#:"):
                comment.insert(0, lines[above].lstrip()[2:].strip())
                above -= 1
            found[stmt.target.id] = " ".join(comment)
    return found


def description(model: type[BaseModel], name: str) -> str:
    """The docstring of ``model``'s field ``name``, from the class that declares it; empty when
    it has none."""
    for cls in model.__mro__:
        if issubclass(cls, BaseModel) and cls is not BaseModel:
            declared = _docstrings(cls)
            if name in declared:
                return declared[name]
    return ""


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _array_of(annotation: Any) -> type[BaseModel] | None:
    if get_origin(annotation) in (tuple, list):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        if args and _is_model(args[0]):
            return typing.cast(type[BaseModel], args[0])
    return None


def tables() -> list[tuple[tuple[str, ...], type[BaseModel], bool]]:
    """Every table: (its path, its model, whether it is an array of tables), top level first."""
    from worker.config.models import ConfigFile

    found: list[tuple[tuple[str, ...], type[BaseModel], bool]] = [((), ConfigFile, False)]
    for name, info in ConfigFile.model_fields.items():
        if _is_model(info.annotation):
            found.append(((name,), typing.cast(type[BaseModel], info.annotation), False))
        elif (inner := _array_of(info.annotation)) is not None:
            found.append(((name,), inner, True))
    return found


def config_keys() -> list[Key]:
    """Every key a configuration file may hold, in the models' order."""
    from worker.config.sources import ENV_PREFIX, FLAG_NAMES, SHORT_FORMS

    short: dict[tuple[str, ...], list[str]] = {}
    for var, path in SHORT_FORMS.items():
        short.setdefault(tuple(path), []).append(var)
    out = []
    for path, model, array in tables():
        for name, info in model.model_fields.items():
            if not path and (_is_model(info.annotation) or _array_of(info.annotation)):
                continue  # a table: its keys are listed under it
            full = (*path, name)
            env = None if array else ENV_PREFIX + "__".join(full).upper()
            dotted = ".".join(full)
            out.append(
                Key(
                    path,
                    name,
                    info,
                    description(model, name),
                    env,
                    tuple(short.get(full, ())),
                    FLAG_NAMES.get(dotted),
                )
            )
    return out


def type_name(annotation: Any) -> str:
    """A key's type as a reader of TOML sees it."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return " or ".join(type_name(a) for a in args) + " (optional)"
    if origin is Literal:
        return " or ".join(json.dumps(a) for a in get_args(annotation))
    if origin is dict:
        return "table"
    if origin in (list, tuple):
        return "array"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default(info: FieldInfo) -> str:
    """A key's default as TOML would write it; empty when it is required or computed."""
    if info.default_factory is not None:
        try:
            value = info.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "computed"
        if value in ({}, [], ()):
            return "empty"
        return "computed"
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "unset"
    return code(
        json.dumps(info.default) if not isinstance(info.default, str) else f'"{info.default}"'
    )


def _rst(value: str) -> str:
    """A docstring's reST inline markup (````x````, ``:mod:`x```) as Markdown code."""
    import re

    value = re.sub(r":\w+:`~?([^`]+)`", r"``\1``", value)
    return text(" ".join(value.split()).replace("``", "`"))


def _title(path: tuple[str, ...], array: bool) -> str:
    if not path:
        return "Top level"
    return f"[[{path[0]}]]" if array else f"[{'.'.join(path)}]"


def page() -> str:
    """The whole configuration reference page."""
    from worker.config.sources import ENV_PREFIX

    by_table: dict[tuple[str, ...], list[Key]] = {}
    for key in config_keys():
        by_table.setdefault(key.table, []).append(key)
    parts = [
        "# Configuration\n",
        "Every key of a worker's configuration file, generated from the pydantic models the "
        "file is validated against when the docs are built. A key's value comes from, highest "
        "first: its command-line flag, its `BACKLOG_WORKER_*` environment variable, the TOML "
        "file. Unknown keys and unknown `BACKLOG_WORKER_*` variables are refused, naming the "
        "closest real one. Durations are seconds and end in `_s`. "
        "`config.example.toml` in the repository holds every key with its default.\n",
        f"Environment names nest with `__`: `{ENV_PREFIX}WORKER__CONCURRENCY=8`; a table or an "
        f'array takes JSON (`{ENV_PREFIX}TRACKER__OPTIONS=\'{{"synchronous": "FULL"}}\'`, '
        f'`{ENV_PREFIX}ROLES=\'[{{"name": "coder", "executor": "command"}}]\'`).\n',
    ]
    for path, model, array in tables():
        rows = []
        for key in by_table.get(path, []):
            env = [code(key.env)] if key.env else [f"in {code(ENV_PREFIX + path[0].upper())}"]
            env += [code(s) for s in key.short_env]
            rows.append(
                [
                    code(key.name),
                    text(type_name(key.field.annotation)),
                    default(key.field),
                    ", ".join(env),
                    code(key.flag) if key.flag else "",
                    _rst(key.description),
                ]
            )
        doc = _rst((model.__doc__ or "").strip().split("\n\n")[0]) if path else ""
        header = ["key", "type", "default", "environment", "flag", "meaning"]
        parts.append(
            f"## {_title(path, array)}\n\n" + (doc + "\n\n" if doc else "") + table(header, rows)
        )
    return "\n".join(parts)
