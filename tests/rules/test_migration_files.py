"""The open of a rail plans nothing only when the rail has every migration of this build and was
recorded by a build that knows the compatibility window (tracker_client.rules.migration_files)."""

from __future__ import annotations

import pytest

from tracker_client.embedded import migrate as sqlite_migrate
from tracker_client.rules.migration_files import current, numbered_files
from tracker_client.rules.upgrades import plan

N = sqlite_migrate.SCHEMA_VERSION
L = sqlite_migrate.LEVEL
PREVIOUS = sqlite_migrate.PREVIOUS_RELEASE_LEVEL
ABOVE = set(range(L + 1, N + 1))  # this build's additive migrations above its level


@pytest.mark.parametrize(
    ("level", "additions", "expected"),
    [
        (L, ABOVE, True),  # this build's full schema
        (L, ABOVE | {N + 1}, True),  # and a newer build's additive migration
        (L, ABOVE - {N}, False),  # behind: the last one to apply
        (N, set(), False),  # a build before the window: recorded anew
        (0, set(), False),  # a new rail
        (N + 1, {N + 2}, False),  # a newer build's level: refused by the open
    ],
)
def test_current_agrees_with_the_plan(level: int, additions: set[int], expected: bool) -> None:
    assert L < N  # this build has additive migrations above its level
    assert current(level, additions, N) is expected
    pending = plan(sqlite_migrate._MIGRATIONS, level, additions, PREVIOUS)
    nothing = not pending.now and not pending.explicit
    if expected:  # the plan of this build's real migrations has nothing to do either
        assert nothing and not pending.records_change(level, additions)
    elif level <= N:
        assert not nothing or pending.records_change(level, additions)


def test_the_files_are_listed_in_order_unread() -> None:
    files = numbered_files("tracker_client.embedded")
    assert [n for n, _ in files] == list(range(1, len(files) + 1))
    assert len(files) == sqlite_migrate.SCHEMA_VERSION
    assert numbered_files("tracker_client.postgres")[0][1].name.startswith("0001_")
