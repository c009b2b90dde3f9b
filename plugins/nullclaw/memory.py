"""The ``nullclaw`` executor's memory (the rail's store) and resume (checkpoints).

Memory (option ``memory = {namespace = "notes", top_k = 5, max_chars = 4000, write_key =
"answer-$task_id"}``, off by default): before the run, the store's namespace is searched with
the words of the task's title and description (the rail's search wants every word of a query,
so each word is a query; entries matching more words rank first) and the top ``top_k`` hits go
into the prompt (``$memory``, appended when the template lacks it), each cited by its key, the
whole block at most ``max_chars``. After a successful run the answer is put back under
``write_key`` (``$task_id``/``$run_id`` substituted), so the next task finds it.

Resume (option ``resume``, on by default): a run that fails or is cut off keeps the tail of what
nullclaw had answered so far as the run's checkpoint (``{"partial_answer", "attempt",
"workspace"}``); the next attempt's prompt gets it (``$resume``), with the workspace's path when
the workspace is kept across runs (``workspace = "task"`` or ``"shared"``), so the agent
continues instead of starting over.

It may touch the context's store and checkpoint only (through the context: no token reaches the
child).
"""

from __future__ import annotations

import json
import re
import string
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from plugins.api import ExecutionContext

__all__ = ["MemoryOptions", "keep_partial", "recall", "remember", "resume_text"]

#: How much of a partial answer a checkpoint keeps (its tail): well under the 64 KiB limit.
PARTIAL_CHARS = 16_000
#: The most words of the task searched for.
MAX_WORDS = 12
_WORD = re.compile(r"[^\W_]{3,}")


class MemoryOptions(BaseModel):
    """``memory`` of a nullclaw role: where to search, how much to put in, where to write."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(min_length=1)
    top_k: int = Field(5, ge=1, le=50)
    max_chars: int = Field(4000, ge=200, le=100_000)
    #: Key the answer is put under (``$task_id``, ``$run_id``); None: nothing written back.
    write_key: str | None = Field(None, min_length=1)


def _words(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        seen.setdefault(word, None)
    return list(seen)[:MAX_WORDS]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


async def recall(ctx: ExecutionContext, memory: MemoryOptions) -> str:
    """The prompt's memory block (empty without hits)."""
    score: dict[str, int] = {}
    values: dict[str, Any] = {}
    for word in _words(f"{ctx.task.title} {ctx.task.description}"):
        for entry in await ctx.store.search(word, namespace=memory.namespace, limit=memory.top_k):
            score[entry.key] = score.get(entry.key, 0) + 1
            values[entry.key] = entry.value
    if not score:
        return ""
    ranked = sorted(score, key=lambda k: (-score[k], k))[: memory.top_k]
    lines = [f"Notes from memory (namespace {memory.namespace!r}; cite them by [key]):"]
    used = len(lines[0])
    for key in ranked:
        line = f"[{key}] {_text(values[key])}"
        room = memory.max_chars - used - 1
        if room <= len(key) + 8:
            break
        if len(line) > room:
            line = line[: room - 3] + "..."
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines) if len(lines) > 1 else ""


async def remember(ctx: ExecutionContext, memory: MemoryOptions, answer: str) -> str | None:
    """Put the answer under ``write_key``; the key written (None: not configured)."""
    if memory.write_key is None:
        return None
    key = string.Template(memory.write_key).safe_substitute(task_id=ctx.task.id, run_id=ctx.run.id)
    await ctx.store.put(
        memory.namespace, key, {"task_id": ctx.task.id, "title": ctx.task.title, "answer": answer}
    )
    return key


async def keep_partial(ctx: ExecutionContext, partial: str, workspace: str | None) -> None:
    """Keep what nullclaw answered so far as the run's checkpoint (nothing when it said
    nothing)."""
    text = partial.strip()
    if not text:
        return
    await ctx.checkpoint(
        {"partial_answer": text[-PARTIAL_CHARS:], "attempt": ctx.attempt, "workspace": workspace}
    )


def resume_text(previous: Any) -> str:
    """The prompt's resume block from the previous attempt's checkpoint (empty: none)."""
    if not isinstance(previous, dict) or not isinstance(previous.get("partial_answer"), str):
        return ""
    lines = [
        f"An earlier attempt ({previous.get('attempt', '?')}) at this task was interrupted. "
        "Continue from where it stopped instead of starting over.",
    ]
    if isinstance(previous.get("workspace"), str):
        lines.append(f"Its files are still in your workspace: {previous['workspace']}")
    lines += ["Its partial answer:", previous["partial_answer"]]
    return "\n".join(lines)
