"""Small Markdown helpers for the generated reference pages: escaping text taken from the code
(help strings, docstrings, summaries) so that it renders as written, and tables."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_SPECIAL = re.compile(r"([\\*_\[\]|<>])")


def text(value: str) -> str:
    """``value`` as literal Markdown text: the characters Markdown would read are escaped;
    code written between backticks stays code."""
    parts = re.split(r"(`[^`]*`)", value)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part.replace("|", "\\|"))
        else:
            escaped = _SPECIAL.sub(r"\\\1", part)
            out.append(escaped.replace("\\<", "&lt;").replace("\\>", "&gt;"))
    return "".join(out)


def code(value: object) -> str:
    """``value`` as inline code (a backtick inside is doubled around)."""
    shown = str(value).replace("|", "\\|")
    fence = "``" if "`" in shown else "`"
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A pipe table; each cell already rendered (``text``/``code``), newlines folded."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(cell.replace("\n", " ") or " " for cell in row) + " |")
    return "\n".join(lines) + "\n"


def slug(title: str) -> str:
    """The anchor the ``toc`` extension gives a heading ``title`` (ASCII titles)."""
    lowered = re.sub(r"[^\w\s-]", "", title.lower()).strip()
    return re.sub(r"[-\s]+", "-", lowered)
