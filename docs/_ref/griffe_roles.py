"""A griffe extension for the API reference (mkdocs.yml loads it): the code's docstrings are
written with Sphinx roles (``:class:`Task```, ``:meth:`~Rail.submit```) and reStructuredText
literal blocks (a paragraph ending in ``::``), which Markdown would show as written.
:func:`docs._ref.api.markdown_docstring` rewrites them: a role whose target is on the public face
becomes a link to its entry, any other becomes code. Kept apart from ``api.py`` because only the
docs build has griffe; the tests exercise the rewrite itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # docs._ref, when mkdocs loads this file by its path
    sys.path.insert(0, str(ROOT))

from docs._ref.api import markdown_docstring  # noqa: E402


class SphinxRoles(griffe.Extension):
    """Rewrites each docstring of the project's packages once the package is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring, its roles resolved from its class, then its module."""
        if obj.docstring is None or not obj.path.startswith(("plugins", "tracker_client")):
            return
        module = obj.module.path
        owner = obj.path if obj.is_class else obj.parent.path if obj.parent else module
        obj.docstring.value = markdown_docstring(obj.docstring.value, [owner, module, ""])
