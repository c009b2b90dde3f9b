"""Callables for the python-executor tests (imported by path, as a role would name them)."""

from __future__ import annotations

from typing import Any

import anyio

from plugins.api import ExecutionContext, Failure, Transition

NOT_CALLABLE = 42


async def approve(ctx: ExecutionContext) -> Transition:
    await ctx.report("progress", {"title": ctx.task.title, "option": ctx.options.get("extra")})
    await ctx.artifact("report", f"file://{ctx.workdir}/report.txt", size_bytes=3)
    return Transition(trigger="approve", instructions="go")


async def give_up(ctx: ExecutionContext) -> Failure:
    return Failure(reason="no_luck", message="nope", retryable=False)


async def nothing(ctx: ExecutionContext) -> None:
    return None


async def as_dict(ctx: ExecutionContext) -> dict[str, Any]:
    return {"trigger": "reject", "instructions": "redo", "usage": {"tokens": 7}}


async def bad_dict(ctx: ExecutionContext) -> dict[str, Any]:
    return {"trigger": "x", "colour": "red"}


async def bad_trigger(ctx: ExecutionContext) -> dict[str, Any]:
    return {"trigger": 5}


async def a_string(ctx: ExecutionContext) -> str:
    return "complete"


async def explode(ctx: ExecutionContext) -> None:
    raise RuntimeError("kaboom")


async def wait_forever(ctx: ExecutionContext) -> None:
    await ctx.report("started", {})
    await anyio.sleep_forever()


async def until_shutdown(ctx: ExecutionContext) -> Transition:
    await ctx.report("started", {})
    await ctx.wait_shutdown()
    return Transition(trigger="checkpoint" if ctx.shutting_down else "complete")


def sync_function(ctx: ExecutionContext) -> None:
    return None


class AsyncCallable:
    async def __call__(self, ctx: ExecutionContext) -> Transition:
        return Transition(trigger="called")


instance = AsyncCallable()


class Namespace:
    approve = staticmethod(approve)


def hangs_on_hang(ctx: Any) -> None:
    """A plain ``def`` that ignores cancellation for 2 s on a task titled ``hang``."""
    import time

    if ctx.task.title == "hang":
        time.sleep(2.0)


# -- results as values (docs/executors/python-jobs.md) ---------------------------------------
async def celery_habit(ctx: ExecutionContext) -> dict[str, Any]:
    return {"summary": f"read {ctx.task.title}", "words": 3}


async def a_list(ctx: ExecutionContext) -> list[Any]:
    return [1, "two", None, 4.5, (5, 6)]


async def a_number(ctx: ExecutionContext) -> int:
    return 42


async def routed_with_result(ctx: ExecutionContext) -> dict[str, Any]:
    return {"trigger": "approve", "result": {"score": 0.9}}


async def only_result(ctx: ExecutionContext) -> dict[str, Any]:
    return {"result": [1, 2]}


async def result_beside_data(ctx: ExecutionContext) -> dict[str, Any]:
    return {"status": "ok", "result": [1, 2]}


async def mixed_dict(ctx: ExecutionContext) -> dict[str, Any]:
    return {"trigger": "approve", "summary": "ok"}


async def a_bool(ctx: ExecutionContext) -> bool:
    return False


async def own_trigger_as_str(ctx: ExecutionContext) -> Transition | str:
    if ctx.task.metadata.get("explicit"):
        return Transition("approve")
    return "approve"


async def a_set(ctx: ExecutionContext) -> dict[str, Any]:
    return {"tags": {"a", "b"}}


async def not_a_number(ctx: ExecutionContext) -> list[float]:
    return [1.0, float("nan")]


async def int_keys(ctx: ExecutionContext) -> dict[int, str]:
    return {1: "one"}


async def an_object(ctx: ExecutionContext) -> object:
    return object()


async def big_result(ctx: ExecutionContext) -> dict[str, Any]:
    return {"rows": ["x" * 1000] * 100}  # about 100 KB of JSON, over the 64 KiB inline cap


def sync_result(ctx: Any) -> dict[str, Any]:
    return {"summary": "from a thread"}
