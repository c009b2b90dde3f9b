"""Generates the reference pages at build time (mkdocs-gen-files) from the code itself:
the CLI from the click commands, configuration keys from the pydantic models, the HTTP API from
the contract table, the metrics from the metrics registries and the exit codes from the CLI's
table, so the reference cannot drift. Each page's generator is a module of ``docs/_ref/``;
``tests/docs/test_reference.py`` runs them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # docs._ref, when mkdocs runs from elsewhere
    sys.path.insert(0, str(ROOT))

from docs._ref import cli, configuration, exit_codes, http_api, metrics  # noqa: E402

#: Each generated page and the function that writes it.
PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli.page,
    "reference/configuration.md": configuration.page,
    "reference/http-api.md": http_api.page,
    "reference/metrics.md": metrics.page,
    "reference/exit-codes.md": exit_codes.page,
}

for path, render in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(render())
