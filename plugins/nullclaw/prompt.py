"""Prompt building for the ``nullclaw`` executor.

The prompt is rendered from a :class:`string.Template` (``$name`` placeholders, ``$$`` for a
literal dollar). Placeholders:

``$title``, ``$description``, ``$metadata`` (the task metadata as indented JSON, ``(none)`` when
empty), ``$instructions`` (of the transition that led to this stage, ``(none)`` when empty),
``$task_id``, ``$run_id``, ``$attempt``, ``$stage``, ``$pipeline_id``, ``$workspace`` (absolute
path of nullclaw's workspace), ``$verdict_instructions`` (the line asking a reviewer for a
verdict when the role has ``triggers``; empty otherwise; appended at the end when a custom
template does not use it), ``$memory`` (notes found in the store, option ``memory``) and
``$resume`` (an interrupted earlier attempt's partial answer); the last two are appended, before
the verdict line, when they have text and the template does not use them.

Two NullClaw CLI traps are handled here: a prompt beginning with ``/`` would run a slash
command and a prompt beginning with ``-`` could be read as a flag, so such a prompt gets the line
``Task:`` in front; and one argv string is limited to 128 KiB, so a prompt larger than
``max_prompt_arg_bytes`` is either refused (``oversized_prompt = "fail"``) or written to a file in
the workspace, and nullclaw gets a short ``-m`` asking it to read that file
(``oversized_prompt = "file"``, the default).

The CLI reads its one message from ``-m`` only (not from stdin, not from a file), and a process's
argv is visible to every local user (``ps``). So by default (``max_prompt_arg_bytes = 0``) every
prompt goes through that workspace file (mode 0600 in a 0700 workspace, removed after the run),
and the argv holds only the short request to read it; a non-zero ``max_prompt_arg_bytes`` puts
prompts up to that size inline in ``-m`` (one tool call less for the agent, but the task's text
is in ``ps``; see docs/operate/long-running.md).

Pure text: it touches no file (an oversized prompt's file is written by the executor where
:func:`plan_prompt` says).
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracker_client.errors import ExecutorError

__all__ = [
    "DEFAULT_TEMPLATE",
    "PLACEHOLDERS",
    "PROMPT_GUARD",
    "PromptPlan",
    "PromptTooLarge",
    "check_template",
    "plan_prompt",
    "render_prompt",
]

#: The template used when a role sets neither ``prompt_template`` nor ``prompt_template_file``.
DEFAULT_TEMPLATE = """\
Task: $title

$description

Instructions for this step:
$instructions

Task metadata (JSON):
$metadata
$verdict_instructions
"""

PLACEHOLDERS = frozenset(
    {
        "title",
        "description",
        "metadata",
        "instructions",
        "task_id",
        "run_id",
        "attempt",
        "stage",
        "pipeline_id",
        "workspace",
        "verdict_instructions",
        "memory",
        "resume",
    }
)

#: Put in front of a rendered prompt that would otherwise begin with ``/`` or ``-``.
PROMPT_GUARD = "Task:\n"

_BLANK_RUNS = re.compile(r"\n{3,}")


class PromptTooLarge(Exception):
    """The rendered prompt is over ``max_prompt_arg_bytes`` and the policy is ``fail``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the prompt is {size} bytes, more than max_prompt_arg_bytes = {limit}: nullclaw "
            "takes its prompt as one argv string (Linux limit 128 KiB); shorten the task or set "
            'oversized_prompt = "file"'
        )
        self.size = size
        self.limit = limit


@dataclass(frozen=True, slots=True)
class PromptPlan:
    """What to run: ``message`` goes to ``-m``; when ``file`` is set, ``prompt`` is written
    there first (and ``message`` points the agent at it)."""

    message: str
    prompt: str
    file: Path | None = None


def check_template(template: str | None) -> None:
    """Refuse a template with a broken ``$`` or an unknown placeholder (names it)."""
    if template is None:
        return
    tpl = string.Template(template)
    if not tpl.is_valid():
        raise ExecutorError(
            "nullclaw executor: option 'prompt_template': invalid placeholder syntax "
            "(write $$ for a literal dollar sign)"
        )
    unknown = sorted(set(tpl.get_identifiers()) - PLACEHOLDERS)
    if unknown:
        raise ExecutorError(
            f"nullclaw executor: option 'prompt_template': unknown placeholder(s) "
            f"{', '.join('$' + u for u in unknown)} (known: "
            f"{', '.join('$' + p for p in sorted(PLACEHOLDERS))})"
        )


def verdict_instructions(triggers: dict[str, str]) -> str:
    """The reviewer's request for a verdict line, or "" without a trigger map."""
    if not triggers:
        return ""
    words = ", ".join(triggers)
    return f"\nEnd your answer with a final line holding exactly one of these words: {words}."


def _clean(text: str) -> str:
    # A NUL cannot be passed in argv, and lone surrogates cannot be encoded: replace both.
    text = text.replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8")


def render_prompt(
    template: str | None,
    *,
    title: str,
    description: str,
    metadata: Any,
    instructions: str | None,
    task_id: str,
    run_id: str,
    attempt: int,
    stage: str,
    pipeline_id: str,
    workspace: Path,
    triggers: dict[str, str],
    memory: str = "",
    resume: str = "",
) -> str:
    """Render the prompt; the result never begins with ``/`` or ``-`` and is never empty."""
    tpl_text = DEFAULT_TEMPLATE if template is None else template
    used = string.Template(tpl_text).get_identifiers()
    extra = "".join(
        f"${name}\n\n"
        for name, text in (("memory", memory), ("resume", resume))
        if text
        if name not in used
    )
    if extra and "$verdict_instructions" in tpl_text:  # the verdict line stays last
        tpl_text = tpl_text.replace("$verdict_instructions", extra + "$verdict_instructions", 1)
    elif extra:
        tpl_text = tpl_text.rstrip("\n") + "\n\n" + extra
    verdict = verdict_instructions(triggers)
    if verdict and "verdict_instructions" not in string.Template(tpl_text).get_identifiers():
        tpl_text = tpl_text.rstrip("\n") + "\n$verdict_instructions\n"
    meta_text = (
        "(none)"
        if metadata in (None, {}, [], "")
        else json.dumps(metadata, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    )
    values = {
        "title": title,
        "description": description,
        "metadata": meta_text,
        "instructions": instructions.strip() if instructions and instructions.strip() else "(none)",
        "task_id": task_id,
        "run_id": run_id,
        "attempt": str(attempt),
        "stage": stage,
        "pipeline_id": pipeline_id,
        "workspace": str(workspace),
        "verdict_instructions": verdict,
        "memory": memory,
        "resume": resume,
    }
    text = _clean(string.Template(tpl_text).substitute(values))
    text = _BLANK_RUNS.sub("\n\n", text).strip("\n")
    if not text.strip():
        text = f"Task: {_clean(title)}".rstrip()
    if text.lstrip().startswith(("/", "-")):
        text = PROMPT_GUARD + text
    return text


def plan_prompt(
    prompt: str, *, limit: int, policy: str, workspace: Path, run_id: str
) -> PromptPlan:
    """Decide how the prompt reaches nullclaw: inline in ``-m`` (at most ``limit`` bytes; 0:
    never) or through a workspace file.

    Raises :class:`PromptTooLarge` when it is over a non-zero ``limit`` and ``policy == "fail"``.
    """
    size = len(prompt.encode("utf-8"))
    if limit and size <= limit:
        return PromptPlan(message=prompt, prompt=prompt)
    if limit and policy == "fail":
        raise PromptTooLarge(size, limit)
    why = f"Your task is too long to be given inline ({size} bytes). It" if limit else "Your task"
    safe_run = re.sub(r"[^A-Za-z0-9._-]", "_", run_id) or "run"
    rel = Path(".backlog-worker") / f"prompt-{safe_run}.md"
    path = workspace / rel
    message = (
        f"{why} is in the file {rel.as_posix()} in your workspace (absolute path: {path}). "
        "Read that whole file first, then do exactly what it asks; answer as that file instructs."
    )
    return PromptPlan(message=message, prompt=prompt, file=path)
