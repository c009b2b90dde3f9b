"""The fenced code blocks of the documentation (``docs/**/*.md`` and ``README.md``), as data.

Tests read the code they run out of the pages through this module, so a page cannot drift from
what works; ``test_every_block_is_tested.py`` requires every block a reader would run to be run
by a test, marked illustrative, or included from a tested file under ``examples/``.

A block's *marker* is an HTML comment on the line before its fence (invisible on the page)::

    <!-- tested-by: tests/docs/test_walkthroughs.py -->
    <!-- illustrative: needs root and systemd -->
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Block", "blocks", "doc_pages", "find", "shell_commands"]

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>tested-by|illustrative):\s*(?P<value>.*?)\s*-->\s*$")
_TITLE = re.compile(r'title="(?P<title>[^"]*)"')


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language and title, its text, and its marker."""

    page: str  # the path from the repository's root, e.g. "docs/operate/commands.md"
    line: int  # 1-based line of the opening fence
    lang: str  # the info string's first word ("" when none)
    title: str  # the ``title="..."`` attribute ("" when none)
    body: str  # the lines between the fences, the fence's indentation removed
    marker: str  # "tested-by" | "illustrative" | ""
    marker_value: str  # the files after "tested-by:", or the reason after "illustrative:"

    @property
    def where(self) -> str:
        """``page:line``, how a failure names the block."""
        return f"{self.page}:{self.line}"

    @property
    def snippet_paths(self) -> list[str]:
        """The files a block made only of ``--8<-- "path"`` lines includes (else empty)."""
        lines = [ln.strip() for ln in self.body.splitlines() if ln.strip()]
        found = [re.fullmatch(r'--8<--\s+"([^":]+)"', ln) for ln in lines]
        if not lines or not all(found):
            return []
        return [m.group(1) for m in found if m is not None]


def _language(info: str) -> str:
    """The fence's language: ``python`` of ``python title="x"`` or ``{ .python title="x" }``."""
    if info.startswith("{"):
        first = re.search(r"\.([\w-]+)", info)
        return first.group(1) if first else ""
    return info.split()[0] if info else ""


def doc_pages() -> list[Path]:
    """Every page a reader sees: README.md and the markdown under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path | str) -> list[Block]:
    """The fenced blocks of one page, in order."""
    path = ROOT / page if isinstance(page, str) else page
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        marker, value = "", ""
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and (m := _MARKER.match(lines[j])):
            marker, value = m["kind"], m["value"]
        body: list[str] = []
        k = i + 1
        while k < len(lines) and lines[k].strip() != fence:
            body.append(lines[k][len(indent) :] if lines[k].startswith(indent) else lines[k])
            k += 1
        title = _TITLE.search(info)
        found.append(
            Block(
                page=rel,
                line=i + 1,
                lang=_language(info),
                title=title["title"] if title else "",
                body="\n".join(body) + "\n",
                marker=marker,
                marker_value=value,
            )
        )
        i = k + 1
    return found


def find(page: str, *, lang: str | None = None, title: str | None = None, after: str = "") -> Block:
    """The first block of ``page`` (after the text ``after``) with that language and title."""
    text = (ROOT / page).read_text(encoding="utf-8")
    if after:
        assert after in text, f"{page} has no {after!r}"
        start = text[: text.index(after)].count("\n") + 1
    else:
        start = 0
    for block in blocks(page):
        if block.line <= start:
            continue
        if lang is not None and block.lang != lang:
            continue
        if title is not None and block.title != title:
            continue
        return block
    raise AssertionError(f"{page}: no block (lang={lang!r}, title={title!r}) after {after!r}")


def shell_commands(body: str) -> list[str]:
    """A shell block's commands: continuations joined, comments and blank lines dropped."""
    joined = body.replace("\\\n", " ")
    lines = [ln.split("  #", 1)[0].strip() for ln in joined.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]
