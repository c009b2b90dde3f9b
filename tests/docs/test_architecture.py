"""The floors the architecture page draws (docs/architecture/index.md) hold in the code: a floor
imports only the floors below it, so ``tracker_client`` (the rail) imports nothing of
``plugins`` or ``worker``, and ``plugins`` (the executors) nothing of ``worker``. Every import
counts, also one inside a function or under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Each floor and the floors above it, which it must not import.
ABOVE = {"tracker_client": ("plugins", "worker"), "plugins": ("worker",)}


def imports_from_above(package: str, root: Path = ROOT) -> list[str]:
    """``file:line: module`` for each import in ``package`` of a floor above it."""
    above = ABOVE[package]
    found = []
    for path in sorted((root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in above:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return found


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_a_floor_imports_nothing_from_the_floors_above(package: str) -> None:
    assert len(list((ROOT / package).rglob("*.py"))) > 20
    found = imports_from_above(package)
    assert not found, "an import runs back up:\n" + "\n".join(found)


def test_the_check_sees_an_import_from_above(tmp_path: Path) -> None:
    """The check itself: a lazy import inside a function and a plain ``import`` are found."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "lazy.py").write_text(
        "import worker\n\ndef f():\n    from worker.cli import main\n    return main\n"
    )
    assert imports_from_above("plugins", tmp_path) == [
        "plugins/lazy.py:1: worker",
        "plugins/lazy.py:4: worker.cli",
    ]


def test_every_file_the_page_names_exists() -> None:
    """The map names real rooms: a file moved or renamed fails here until the page follows."""
    page = (ROOT / "docs" / "architecture" / "index.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:worker|plugins|tracker_client|tests)/[\w/]+(?:\.py)?/?)`", page))
    assert len(named) > 40
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/architecture/index.md names files that don't exist: {missing}"


#: The floors inside ``tracker_client`` (docs/architecture/index.md, "The floors"), lowest
#: first: a module imports only modules of its own floor or below. The most specific prefix
#: names a module's floor.
RAIL_FLOORS: tuple[tuple[str, ...], ...] = (
    # 0. the vocabulary: errors, models, bounds, the contract as data
    (
        "tracker_client.errors",
        "tracker_client.bounds",
        "tracker_client.jsonlimits",
        "tracker_client.validation",
        "tracker_client.urlmask",
        "tracker_client.capabilities",
        "tracker_client.sweeps",
        "tracker_client.models",
        "tracker_client.cold_models",
        "tracker_client.agent_models",
        "tracker_client.ops_models",
        "tracker_client.maintenance_models",
        "tracker_client.observe_models",
        "tracker_client.observe_cold",
        "tracker_client.schedule_models",
        "tracker_client.task_states",
        "tracker_client.extras",
        "tracker_client.contract",
    ),
    # 1. the seam: what a worker needs of a rail, as types
    ("tracker_client.protocol", "tracker_client.calls", "tracker_client.agents"),
    # 2. the rules, written once; claiming ahead, shared by an engine and the HTTP client
    ("tracker_client.rules", "tracker_client.ahead"),
    # 3. the engines and the HTTP client
    ("tracker_client.embedded", "tracker_client.postgres", "tracker_client.nulltickets"),
    # 4. opening a rail from its URL, and moving one between engines
    ("tracker_client.factory", "tracker_client.railcopy"),
    # 5. the front doors: applications, the served rail, the dashboard, MCP
    (
        "tracker_client.producer",
        "tracker_client.serve",
        "tracker_client.dashboard",
        "tracker_client.mcp",
        "tracker_client",
    ),
)


def _rail_floor(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for floor, prefixes in enumerate(RAIL_FLOORS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[1]):
                best = (floor, len(prefix))
    return None if best is None else best[0]


def rail_imports_upward(root: Path = ROOT) -> list[str]:
    """``file:line: module`` for each import in ``tracker_client`` of a higher floor."""
    found = []
    for path in sorted((root / "tracker_client").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = _rail_floor(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                there = _rail_floor(name) if name != "tracker_client" else None
                if here is not None and there is not None and there > here:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return sorted(set(found))


def test_every_rail_module_has_a_floor() -> None:
    modules = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (ROOT / "tracker_client").rglob("*.py")
    ]
    assert [m for m in modules if _rail_floor(m) is None] == []


def test_no_rail_module_imports_from_a_higher_floor() -> None:
    found = rail_imports_upward()
    assert not found, "an import runs back up inside tracker_client:\n" + "\n".join(found)


def test_the_floor_check_sees_an_upward_import(tmp_path: Path) -> None:
    (tmp_path / "tracker_client" / "rules").mkdir(parents=True)
    (tmp_path / "tracker_client" / "rules" / "x.py").write_text(
        "def f():\n    from tracker_client.embedded.engine import SqliteEngine\n"
    )
    assert rail_imports_upward(tmp_path) == [
        "tracker_client/rules/x.py:2: tracker_client.embedded.engine",
        "tracker_client/rules/x.py:2: tracker_client.embedded.engine.SqliteEngine",
    ]
