"""Generates the reference pages at build time (mkdocs-gen-files) from the code itself:
the CLI from the click commands, configuration keys from the pydantic models, the HTTP API from
the contract table, the metrics from the metrics registries and the exit codes from the CLI's
table, so the reference cannot drift. Each page's generator is a module of ``docs/_ref/``
(:func:`docs._ref.pages`); ``tests/docs/test_reference.py`` runs them."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # docs._ref, when mkdocs runs from elsewhere
    sys.path.insert(0, str(ROOT))

from docs._ref import pages  # noqa: E402

for path, render in pages().items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(render())
