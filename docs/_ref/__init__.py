"""The reference pages' generators (run by ``docs/gen_ref.py`` at build time, and by
``tests/docs/test_reference.py``): each reads the code's own list and renders one page."""

from __future__ import annotations

from collections.abc import Callable


def pages() -> dict[str, Callable[[], str]]:
    """Each generated page (its path under ``docs/``) and the function that renders it."""
    from . import api, cli, configuration, exit_codes, http_api, metrics

    return {
        **api.pages(),
        "reference/cli.md": cli.page,
        "reference/configuration.md": configuration.page,
        "reference/http-api.md": http_api.page,
        "reference/metrics.md": metrics.page,
        "reference/exit-codes.md": exit_codes.page,
    }
