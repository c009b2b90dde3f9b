"""The worker never probes its tracker: what a rail can do is declared as types
(:class:`~tracker_client.protocol.RailParts`, chosen once from the rail's capabilities), so no
``getattr``, ``isinstance``, ``issubclass`` or ``cast`` on a tracker is left in ``worker/``.

An AST check rather than a grep: it sees a probe however it is spelled (a tracker under
another name is still caught by the protocol it is checked against, or by the operation name
``getattr`` looks up).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import tracker_client.protocol as protocol
from tracker_client.embedded import EmbeddedTracker
from tracker_client.protocol import RailParts

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "worker"

#: The names a tracker goes by in the worker (a variable or an attribute).
TRACKER_NAMES = frozenset({"tracker", "_tracker", "rail", "_rail"})
#: The seam's protocols (a check against one is a probe whatever the value is called).
PROTOCOLS = frozenset(set(protocol.__all__) - {"RailParts"})
#: Every operation of the whole rail (``getattr(x, "finish_many")`` is a probe).
OPERATIONS = frozenset(name for name in dir(protocol.Tracker) if not name.startswith("_"))
PROBES = frozenset({"getattr", "hasattr", "isinstance", "issubclass", "cast"})
#: Not a tracker: ``[tracker]``, the configuration section, compared key by key on a reload.
NOT_A_TRACKER = frozenset(
    {("worker/config/reload.py", "running.tracker"), ("worker/config/reload.py", "fresh.tracker")}
)


def _probe_name(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else None
    if isinstance(func, ast.Attribute) and func.attr == "cast":
        name = "cast"
    return name if name in PROBES else None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _tail(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def probes_in(source: str, path: str) -> list[str]:
    """Each probe of a tracker in ``source`` (of ``path``, relative to the root), as
    ``path:line: code``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or _probe_name(node) is None or not node.args:
            continue
        probe = _probe_name(node)
        value, kind = (node.args[1], node.args[0]) if probe == "cast" else (node.args[0], None)
        if kind is None and len(node.args) > 1:
            kind = node.args[1]
        shown = ast.unparse(value)
        hit = _tail(value) in TRACKER_NAMES and (path, shown) not in NOT_A_TRACKER
        if kind is not None:
            hit = hit or bool(_names(kind) & PROTOCOLS)
            if isinstance(kind, ast.Constant) and probe == "cast":  # cast("Tracker", x)
                hit = hit or kind.value in PROTOCOLS
            if isinstance(kind, ast.Constant) and kind.value in OPERATIONS:
                hit = hit or probe in ("getattr", "hasattr")
        if hit:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_worker_never_probes_its_tracker() -> None:
    found: list[str] = []
    for file in sorted(WORKER.rglob("*.py")):
        path = file.relative_to(ROOT).as_posix()
        found += probes_in(file.read_text(encoding="utf-8"), path)
    assert found == [], "declare the capability as a type (RailParts), don't probe:\n" + (
        "\n".join(found)
    )


def test_the_check_sees_each_kind_of_probe() -> None:
    probes = """
send = getattr(tracker, "finish_many", None)
ok = isinstance(self._tracker, Tracker)
rail = cast(Tracker, session.tracker)
also = typing.cast("LeaseTracker", x)
renamed = isinstance(thing, Finishes)
looked_up = hasattr(thing, "claim_many")
"""
    assert len(probes_in(probes, "worker/x.py")) == 6


def test_the_check_leaves_other_calls_alone() -> None:
    fine = """
isinstance(exc, TrackerRejected)
getattr(running.worker, name)
getattr(running.tracker, name) != getattr(fresh.tracker, name)
cast(int, value)
cast("int", value)
"""
    assert probes_in(fine, "worker/config/reload.py") == []


@pytest.mark.anyio
async def test_the_parts_are_what_the_rail_declares(tmp_path: Path) -> None:
    rail = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        caps = await rail.capabilities()
        whole = RailParts.declared(rail, caps)
        assert (whole.claim_many, whole.finish, whole.finish_many, whole.workers) == (rail,) * 4
        plain = RailParts.declared(rail, dataclasses.replace(caps, extensions=frozenset()))
        assert plain.rail is rail
        assert (plain.claim_many, plain.finish, plain.finish_many, plain.workers) == (None,) * 4
    finally:
        await rail.aclose()
