"""The compatibility window's plan (tracker_client/rules/upgrades.py): what an open applies,
what waits for ``rail migrate``, and the level and additions a rail then records."""

from __future__ import annotations

from tracker_client.rules.upgrades import Migration, additive, level_of, plan

ADD = "-- additive\nCREATE TABLE x (a);"
BREAK = "ALTER TABLE t RENAME COLUMN a TO b;"
#: 1-3 the previous release's; 4 additive; 5 breaking; 6 additive.
MIGRATIONS = [
    Migration(1, "0001_a.sql", BREAK),
    Migration(2, "0002_b.sql", BREAK),
    Migration(3, "0003_c.sql", BREAK),
    Migration(4, "0004_d.sql", ADD),
    Migration(5, "0005_e.sql", BREAK),
    Migration(6, "0006_f.sql", ADD),
]


def _numbers(ms: tuple[Migration, ...]) -> list[int]:
    return [m.number for m in ms]


def test_the_marker_is_a_line_of_its_own() -> None:
    assert additive(ADD)
    assert not additive("-- additive changes follow\nCREATE TABLE x (a);")
    assert not additive(BREAK)


def test_an_open_applies_the_additive_and_leaves_the_breaking_to_rail_migrate() -> None:
    p = plan(MIGRATIONS[:4] + MIGRATIONS[4:], 3, set(), previous_release_level=3)
    assert _numbers(p.now) == [4]
    assert _numbers(p.explicit) == [5, 6]  # 6 waits behind 5 though additive
    assert (p.level, p.additions) == (3, frozenset({4}))


def test_rail_migrate_applies_everything_and_raises_the_level() -> None:
    p = plan(MIGRATIONS, 3, {4}, previous_release_level=3, explicit_step=True)
    assert _numbers(p.now) == [5, 6]
    assert p.explicit == ()
    assert (p.level, p.additions) == (5, frozenset({6}))


def test_what_the_previous_release_has_is_applied_at_open() -> None:
    p = plan(MIGRATIONS, 1, set(), previous_release_level=3)
    assert _numbers(p.now) == [2, 3, 4]
    assert (p.level, p.additions) == (3, frozenset({4}))


def test_a_rail_written_before_the_window_is_recorded_anew() -> None:
    # a build before the window recorded every migration in its level: 4 was additive
    p = plan(MIGRATIONS, 4, set(), previous_release_level=3)
    assert p.now == () and (p.level, p.additions) == (3, frozenset({4}))
    assert p.records_change(4, set())
    assert not p.records_change(3, {4})


def test_the_level_is_the_highest_non_additive_migration_applied() -> None:
    assert level_of(MIGRATIONS, [1, 2, 3, 4]) == 3
    assert level_of(MIGRATIONS, range(1, 7)) == 5
    assert level_of(MIGRATIONS, []) == 0
