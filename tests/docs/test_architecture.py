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
