"""The triggers a python job names in its own source, read without running it.

``backlog-worker check`` holds every trigger a role can send against the pipelines
(:class:`plugins.api.SupportsTriggers`); for a python job those are the literal triggers of its
function's body: ``Transition("approve")``, ``Transition(trigger="approve")`` and a returned
``{"trigger": "approve", ...}``. A trigger computed at run time, or named in a helper the
function calls, is not seen (the run still reports it, as ``invalid_trigger``).

It may touch the function's source file (read through :mod:`inspect`) only; nothing is imported
or run.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from plugins.api import NamedTrigger

__all__ = ["literal_triggers"]


def _source(function: Any) -> tuple[str, int] | None:
    """The function's source and its first line (an instance: its ``__call__``), or None."""
    target = function if inspect.isroutine(function) else type(function).__call__
    try:
        lines, first = inspect.getsourcelines(inspect.unwrap(target))
    except (OSError, TypeError):  # built in, made at run time, no file
        return None
    return textwrap.dedent("".join(lines)), first


def _named(node: ast.expr) -> str | None:
    """The literal trigger of a ``Transition(...)`` call or a ``{"trigger": ...}`` display."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name != "Transition":
            return None
        values = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "trigger")]
    elif isinstance(node, ast.Dict):
        values = [
            v
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and k.value == "trigger"
        ]
    else:
        return None
    for value in values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
            return value.value
    return None


def literal_triggers(function: Any, path: str) -> list[NamedTrigger]:
    """The literal triggers of ``function``'s body, each with its line (``path`` names it)."""
    found = _source(function)
    if found is None:
        return []
    text, first = found
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a lambda's line, say: nothing to read
        return []
    candidates: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            candidates.append(node)
        elif isinstance(node, ast.Return | ast.Yield) and isinstance(node.value, ast.Dict):
            candidates.append(node.value)  # a dict returned is an outcome; others are data
    named: list[NamedTrigger] = []
    for node in sorted(candidates, key=lambda n: (n.lineno, n.col_offset)):
        trigger = _named(node)
        if trigger is not None:
            line = first + node.lineno - 1
            shown = "Transition(...)" if isinstance(node, ast.Call) else "a returned dict"
            named.append(NamedTrigger(trigger, f"{shown} in {path}, line {line}"))
    return named
