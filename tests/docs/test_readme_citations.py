"""No source or shipped file cites a README section: the README is a short front door, and what
its sections once said lives on the docs pages (docs/operate, docs/executors, docs/guarantees...).

Naming ``README.md`` as the front door is fine (``readme = "README.md"``); "see the README",
"(README)", ``README "Running a NullClaw rail"`` or "the README's X section" is a citation of a
section that is no longer there, in a docstring, a comment, a message or a rendered unit.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.blocks import ROOT

#: What ships or runs: the packages, the benches, the units and examples, the example config.
SHIPPED = ("worker", "plugins", "tracker_client", "bench", "contrib", "examples")
FILES = ("config.example.toml", "pyproject.toml")
SUFFIXES = {".py", ".toml", ".service", ".target", ".conf", ".md", ".sh", ".html", ".js", ".sql"}

#: "README" not followed by ".md", or "README.md" followed by a section: "'s", "#anchor", a title.
_CITATION = re.compile(r"\bREADME\b(?!\.md)|README\.md(?:'s|\u2019s|#|\s+[\"\u201c]|\s+section)")


def shipped_files() -> list[Path]:
    """Every text file of the shipped trees (caches and build outputs left out)."""
    found = [ROOT / name for name in FILES]
    for tree in SHIPPED:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.suffix in SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                found.append(path)
    return found


def citations(text: str) -> list[tuple[int, str]]:
    """The (line number, line) of each README section citation in ``text``."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), 1)
        if _CITATION.search(line)
    ]


def test_the_rule_tells_a_front_door_from_a_section() -> None:
    cited = (
        '"""Runs the agent (options: README "Running a NullClaw rail")."""\n'
        "# loopback only: remote workers come through a TLS reverse proxy (README)\n"
        'Rules (the README\'s "PostgreSQL rail" section says them too):\n'
        "see README.md#postgresql-rail\n"
    )
    assert [n for n, _ in citations(cited)] == [1, 2, 3, 4]
    fine = 'readme = "README.md"\nThe front door is README.md; the rest is under docs/.\n'
    assert citations(fine) == []


def test_no_shipped_file_cites_a_readme_section() -> None:
    files = shipped_files()
    assert len(files) > 100 and ROOT / "worker" / "cli" / "errors.py" in files
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line}"
        for path in files
        for number, line in citations(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == [], "cite the docs page that holds it instead:\n" + "\n".join(found)
