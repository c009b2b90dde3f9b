"""ClaimPacing: the claim loop's decisions, without I/O (no tracker, no clock, no randomness)."""

from __future__ import annotations

import pytest

from worker.daemon.pacing import QUIET_PARK_S, ClaimPacing, Step, idle_delay_s

pytestmark = pytest.mark.timeout(10)


def low(a: float, b: float) -> float:
    """A jitter that always picks the low end."""
    return a


def high(a: float, b: float) -> float:
    """A jitter that always picks the high end."""
    return b


def test_probes_with_one_claim_then_widens_once_work_flows() -> None:
    pacing = ClaimPacing(3)
    assert pacing.next_step() is Step.CLAIM
    first = pacing.claim_started()
    assert first.first_of_round
    assert pacing.next_step() is Step.SETTLE  # one probe at a time until one finds work
    assert pacing.claim_ended(first, found=True)  # the last in flight: settled
    tickets = []
    while pacing.next_step() is Step.CLAIM:
        tickets.append(pacing.claim_started())
    assert len(tickets) == 3 and pacing.in_flight == 3
    assert [t.first_of_round for t in tickets] == [True, False, False]


def test_an_empty_claim_stops_new_claims_until_the_round_settles_then_idles() -> None:
    pacing = ClaimPacing(2)
    pacing.claim_ended(pacing.claim_started(), found=True)
    a, b = pacing.claim_started(), pacing.claim_started()
    assert not pacing.claim_ended(a, found=False)  # b is still out
    assert pacing.next_step() is Step.SETTLE
    assert pacing.claim_ended(b, found=False)
    assert pacing.next_step() is Step.IDLE
    assert pacing.round_conclusive()
    pacing.idled()
    pacing.probe()
    assert pacing.idle_round == 1
    assert pacing.next_step() is Step.CLAIM
    pacing.claim_started()
    assert pacing.next_step() is Step.SETTLE  # probing again: one claim


def test_work_found_after_an_empty_claim_wins_the_round() -> None:
    pacing = ClaimPacing(2)
    pacing.claim_ended(pacing.claim_started(), found=True)
    a, b = pacing.claim_started(), pacing.claim_started()
    pacing.claim_ended(a, found=False)
    pacing.claim_ended(b, found=True)
    assert pacing.next_step() is Step.CLAIM  # not idle: b found work


def test_an_empty_round_is_inconclusive_when_a_run_finished_since_its_claim_began() -> None:
    pacing = ClaimPacing(2)
    early = pacing.claim_started()
    pacing.run_finished()  # its report may have made work the claim could not see
    pacing.claim_ended(early, found=False)
    assert pacing.next_step() is Step.IDLE
    assert not pacing.round_conclusive()
    pacing.probe()
    again = pacing.claim_started()
    pacing.claim_ended(again, found=False)
    assert pacing.round_conclusive()  # nothing finished since this one began


def test_the_last_empty_claim_to_end_decides_not_the_last_to_begin() -> None:
    pacing = ClaimPacing(2)
    pacing.claim_ended(pacing.claim_started(), found=True)
    old = pacing.claim_started()  # began before the run finished
    pacing.run_finished()
    new = pacing.claim_started()  # began after
    pacing.claim_ended(new, found=False)
    pacing.claim_ended(old, found=False)
    assert not pacing.round_conclusive()


def test_max_tasks_counts_claims_made_or_in_flight_but_not_empty_ones() -> None:
    pacing = ClaimPacing(4, max_tasks=2)
    pacing.claim_ended(pacing.claim_started(), found=True)
    a = pacing.claim_started()
    # two reserved, one still out: wait for it (stopping now would lose its share if empty)
    assert pacing.next_step() is Step.SETTLE
    pacing.claim_ended(a, found=False)  # found nothing: its reservation is freed
    assert pacing.reserved == 1
    assert pacing.next_step() is Step.IDLE
    pacing.probe()
    pacing.claim_ended(pacing.claim_started(), found=True)
    assert pacing.next_step() is Step.STOP  # two tasks claimed, nothing in flight


def test_max_tasks_stops_only_once_a_batch_of_claims_settled() -> None:
    pacing = ClaimPacing(4, max_tasks=3)
    batch = [pacing.claim_started() for _ in range(3)]  # one claim_many for 3 slots
    assert pacing.next_step() is Step.SETTLE
    pacing.claim_ended(batch[0], found=True)
    pacing.claim_ended(batch[1], found=False)
    pacing.claim_ended(batch[2], found=False)
    assert pacing.reserved == 1
    assert pacing.next_step() is Step.IDLE  # 2 of the budget left: claim again, not stop


def test_an_abandoned_claim_frees_its_reservation_and_says_nothing() -> None:
    pacing = ClaimPacing(1)
    pacing.claim_started()
    pacing.claim_abandoned()
    assert (pacing.in_flight, pacing.reserved) == (0, 0)
    assert pacing.next_step() is Step.CLAIM


def test_a_reload_changes_the_width_of_the_next_rounds() -> None:
    assert [ClaimPacing.claim_width(n) for n in (0, 1, 3, 4, 16, 100)] == [1, 1, 3, 4, 16, 32]
    pacing = ClaimPacing(1)
    pacing.claim_ended(pacing.claim_started(), found=True)
    pacing.width = 3
    pacing.claim_ended(pacing.claim_started(), found=True)
    started = 0
    while pacing.next_step() is Step.CLAIM:
        pacing.claim_started()
        started += 1
    assert started == 3


def test_idle_back_off_doubles_with_equal_jitter_up_to_the_ceiling() -> None:
    assert [idle_delay_s(0.5, 4.0, r, high) for r in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert [idle_delay_s(0.5, 4.0, r, low) for r in range(6)] == [0.5, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_idle_delay_grows_with_idle_rounds_and_is_bounded() -> None:
    pacing = ClaimPacing(1, uniform=high)
    assert pacing.idle_delay_s(1.0, 8.0, float("inf")) == 1.0
    pacing.idled()
    pacing.idled()
    assert pacing.idle_delay_s(1.0, 8.0, float("inf")) == 4.0
    assert pacing.idle_delay_s(1.0, 8.0, 0.3) == 0.3  # e.g. until an own retry is due
    pacing.claim_ended(pacing.claim_started(), found=True)
    assert pacing.idle_round == 0  # work found: the back-off starts over


def test_quiet_parks_start_from_half_the_ceiling_others_back_off() -> None:
    # A rail whose parked claim waits without writing: one draw from half the ceiling to the
    # ceiling from the first idle round (bounded like any idle wait); else the idle back-off.
    pacing = ClaimPacing(1, uniform=low)
    assert pacing.park_s(0.5, 4.0, float("inf"), quiet=True, longest_s=0) == 2.0
    assert pacing.park_s(0.5, 4.0, float("inf"), quiet=False) == 0.5
    assert pacing.park_s(0.5, 4.0, 0.3, quiet=True) == 0.3
    high_pacing = ClaimPacing(1, uniform=high)
    assert high_pacing.park_s(0.5, 4.0, float("inf"), quiet=True, longest_s=0) == 4.0
    assert pacing.park_s(3.0, 4.0, float("inf"), quiet=True, longest_s=0) == 3.0  # >= idle_min_s


def test_quiet_parks_last_up_to_the_longest_park_past_a_short_ceiling() -> None:
    # A quiet park answers as soon as work comes: with idle_max_s under QUIET_PARK_S it waits
    # between half of QUIET_PARK_S and all of it (fewer rounds, each a standing row written
    # and withdrawn), bounded like any idle wait; the back-off of other rails is unchanged.
    pacing = ClaimPacing(1, uniform=low)
    assert pacing.park_s(0.05, 2.0, float("inf"), quiet=True) == QUIET_PARK_S / 2
    assert ClaimPacing(1, uniform=high).park_s(0.05, 2.0, float("inf"), quiet=True) == QUIET_PARK_S
    assert pacing.park_s(0.05, 2.0, float("inf"), quiet=True, longest_s=8.0) == 4.0
    assert pacing.park_s(0.05, 2.0, 1.5, quiet=True) == 1.5  # e.g. until an own retry is due
    assert pacing.park_s(0.05, 2.0, float("inf"), quiet=False) == 0.05


def test_claims_sent_together_count_as_as_many_single_claims() -> None:
    # One claim_many for n slots: one ticket, given back once, leaves the pacing as n claims
    # started and ended one by one would (found ones first, then the empty ones).
    for found in (0, 2, 3):
        together, one_by_one = ClaimPacing(3), ClaimPacing(3)
        for pacing in (together, one_by_one):
            pacing.claim_ended(pacing.claim_started(), found=True)  # work flows: width 3
            pacing.run_finished()
        ticket = together.claims_started(3)
        tickets = [one_by_one.claim_started() for _ in range(3)]
        assert ticket.first_of_round and ticket == tickets[0]
        assert (together.in_flight, together.reserved) == (3, 4)
        together.run_finished()
        one_by_one.run_finished()
        settled = together.claims_ended(ticket, sent=3, found=found)
        ends = [one_by_one.claim_ended(t, found=i < found) for i, t in enumerate(tickets)]
        assert settled == ends[-1]
        assert vars_of(together) == vars_of(one_by_one)
        assert together.next_step() is one_by_one.next_step()
        assert together.round_conclusive() == one_by_one.round_conclusive()


def vars_of(pacing: ClaimPacing) -> dict[str, object]:
    """The pacing's counters and flags (not its random source)."""
    return {k: v for k, v in vars(pacing).items() if k != "_uniform"}
