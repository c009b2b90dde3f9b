"""Safe ``{placeholder}`` templates for the ``command`` executor's argv and env.

Unlike ``str.format`` there is no attribute or item lookup on live objects: a template may only
name the fields listed in :data:`FIELDS` (plus ``task.metadata[key]`` and
``store.<namespace>.<key>``, a value of the rail's store read at the run's start), checked when
the executor is built, and every field renders to plain text inside one argument.

Pure text: it may touch the run's values (task, run, paths) only; no file, no process.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.api import ExecutionContext
from tracker_client.errors import ExecutorError

__all__ = ["FIELDS", "STORE_FIELD", "Template", "TemplateValues"]

#: Every plain placeholder a template may use.
FIELDS = (
    "task.id",
    "task.title",
    "task.description",
    "task.stage",
    "task.pipeline_id",
    "task.priority",
    "run.id",
    "run.agent_id",
    "run.agent_role",
    "attempt",
    "workdir",
    "task_file",
    "instructions",
)
_METADATA = re.compile(r"^task\.metadata\[([^\[\]]+)\]$")
#: ``{store.<namespace>.<key>}``: the value in the rail's store, read when the run starts (the
#: namespace has no dot; the key is the rest). An absent key renders as empty text.
STORE_FIELD = re.compile(r"^store\.([^.\[\]{}]+)\.([^\[\]{}]+)$")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class TemplateValues:
    """The values of one run, looked up by field name."""

    def __init__(
        self,
        ctx: ExecutionContext,
        task_file: Path | None,
        store: dict[str, Any] | None = None,
    ) -> None:
        """``store``: the values of the ``{store.ns.key}`` fields, read before rendering."""
        self.ctx = ctx
        self.task_file = task_file
        self.store = store or {}

    def get(self, field: str, where: str) -> str:
        """The text of ``field``; KeyError (with a message) for an absent metadata key."""
        ctx = self.ctx
        if field.startswith("store."):
            return _text(self.store.get(field))
        match = _METADATA.match(field)
        if match:
            key = match.group(1)
            metadata = ctx.task.metadata
            if not isinstance(metadata, dict) or key not in metadata:
                raise KeyError(
                    f"task {ctx.task.id} has no metadata key {key!r} (needed by {where})"
                )
            return _text(metadata[key])
        simple: dict[str, Any] = {
            "task.id": ctx.task.id,
            "task.title": ctx.task.title,
            "task.description": ctx.task.description,
            "task.stage": ctx.task.stage,
            "task.pipeline_id": ctx.task.pipeline_id,
            "task.priority": ctx.task.priority,
            "run.id": ctx.run.id,
            "run.agent_id": ctx.run.agent_id,
            "run.agent_role": ctx.run.agent_role,
            "attempt": ctx.attempt,
            "workdir": ctx.workdir,
            "task_file": self.task_file,
            "instructions": ctx.instructions,
        }
        value = simple[field]
        return str(value) if isinstance(value, Path) else _text(value)


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and field names, alternating."""

    source: str
    where: str
    parts: tuple[tuple[str, str | None], ...]

    @property
    def has_fields(self) -> bool:
        """True when the template holds at least one placeholder."""
        return any(field is not None for _, field in self.parts)

    @property
    def fields(self) -> list[str]:
        """The placeholders used, in order."""
        return [field for _, field in self.parts if field is not None]

    @classmethod
    def parse(cls, source: str, where: str) -> Template:
        """Parse ``source``; ExecutorError naming ``where`` and the placeholder when invalid."""
        parts: list[tuple[str, str | None]] = []
        try:
            pieces = list(string.Formatter().parse(source))
        except ValueError as exc:
            raise ExecutorError(
                f"command option {where!r}: bad template {source!r}: {exc} "
                "(write '{{' and '}}' for literal braces)"
            ) from exc
        for literal, field, spec, conversion in pieces:
            if field is None:
                parts.append((literal, None))
                continue
            if conversion or spec:
                raise ExecutorError(
                    f"command option {where!r}: placeholder {{{field}}} may not use a "
                    "conversion or format spec"
                )
            if field not in FIELDS and not _METADATA.match(field) and not STORE_FIELD.match(field):
                raise ExecutorError(
                    f"command option {where!r}: unknown placeholder {{{field}}} "
                    f"(known: {', '.join('{' + f + '}' for f in FIELDS)}, "
                    "{task.metadata[key]}, {store.namespace.key})"
                )
            parts.append((literal, field))
        return cls(source=source, where=where, parts=tuple(parts))

    def render(self, values: TemplateValues) -> str:
        """The text for one run. KeyError when the task lacks a metadata key."""
        out: list[str] = []
        for literal, field in self.parts:
            out.append(literal)
            if field is not None:
                out.append(values.get(field, self.where))
        return "".join(out)
