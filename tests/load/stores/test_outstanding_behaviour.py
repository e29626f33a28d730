"""The registry of outstanding units, held on the memory twin and on Redis alike: a
unit's life (record → pushed → requeued → hold / settle) and its place in the sweep's
index, sequences from the store's clock, and the orphan verdicts — a worker silent for
``dead_after_s`` on the clock arms sweeps, and a unit missing from consecutive sweeps is
an orphan."""

from __future__ import annotations

from tidegate.flow.backends import ManualClock
from tidegate.load.outstanding import IndexEntry, OutstandingUnit, find_orphans
from tidegate.load.protocols import OutstandingStore

#: The shared clock's start in µs: the first sequence any store hands out.
T0_US = 1_700_000_000_000_000


def unit(
    key: str, queue: str = "edi.tos", task_id: str | None = None, lane: str = ""
) -> OutstandingUnit:
    return OutstandingUnit(key, "edi.tos.lodge", task_id or f"id-{key}", queue, [key], {}, lane)


def miss_once(store: OutstandingStore, key: str) -> None:
    """One sweep that did not find ``key``'s message (far from the threshold)."""
    verdict = find_orphans(
        [unit(key)], present_task_ids=set(), parked_keys=set(), misses={}, threshold=3
    )
    store.store_misses(verdict, present=[])


def test_the_store_is_an_outstanding_store(outstanding: OutstandingStore) -> None:
    assert isinstance(outstanding, OutstandingStore)


def test_a_record_is_kept_and_indexed_as_published_under_s0_from_the_clock(
    outstanding: OutstandingStore,
) -> None:
    s0 = outstanding.record(unit("K1"))
    assert s0 == T0_US
    assert outstanding.get("K1") == unit("K1")
    assert len(outstanding) == 1
    assert outstanding.queues() == ["edi.tos"]
    assert outstanding.indexed("K1", "edi.tos") == IndexEntry("published", s0)
    assert outstanding.get("K2") is None
    assert outstanding.indexed("K2", "edi.tos") is None


def test_sequences_never_repeat_on_one_instant_and_follow_the_clock(
    outstanding: OutstandingStore, clock: ManualClock
) -> None:
    first = [outstanding.record(unit(f"K{i}")) for i in range(3)]
    assert first == [T0_US, T0_US + 1, T0_US + 2]
    clock.advance(1.0)
    assert outstanding.record(unit("K9")) == T0_US + 1_000_000


def test_pushed_moves_the_unit_to_pushed_under_a_later_s1(
    outstanding: OutstandingStore, clock: ManualClock
) -> None:
    s0 = outstanding.record(unit("K1"))
    clock.advance(0.5)
    s1 = outstanding.pushed("K1", "edi.tos", s0)
    assert s1 == T0_US + 500_000
    assert outstanding.indexed("K1", "edi.tos") == IndexEntry("pushed", s1)
    assert outstanding.pushed("K1", "edi.tos", s0) == 0  # no longer waiting under s0


def test_a_push_confirmed_for_an_older_message_is_ignored(outstanding: OutstandingStore) -> None:
    """The unit was published again meanwhile: the late confirm of the first message
    must not index the second one as pushed."""
    old = outstanding.record(unit("K1", task_id="t-1"))
    new = outstanding.record(unit("K1", task_id="t-2"))
    assert outstanding.pushed("K1", "edi.tos", old) == 0
    assert outstanding.indexed("K1", "edi.tos") == IndexEntry("published", new)
    assert outstanding.get("K1") == unit("K1", task_id="t-2")
    assert len(outstanding) == 1


def test_the_sweep_can_stamp_a_given_s1(outstanding: OutstandingStore) -> None:
    s0 = outstanding.record(unit("K1"))
    assert outstanding.pushed("K1", "edi.tos", s0, s1=42) == 42
    assert outstanding.indexed("K1", "edi.tos") == IndexEntry("pushed", 42)


def test_a_new_record_moves_the_unit_to_its_new_lane(outstanding: OutstandingStore) -> None:
    s0 = outstanding.record(unit("K1"))
    outstanding.pushed("K1", "edi.tos", s0)
    s0b = outstanding.record(unit("K1", lane="edi.tos\x06\x163"))
    assert outstanding.indexed("K1", "edi.tos") is None
    assert outstanding.indexed("K1", "edi.tos\x06\x163") == IndexEntry("published", s0b)


def test_requeued_gives_the_current_message_a_new_s1_and_clears_its_misses(
    outstanding: OutstandingStore,
) -> None:
    s0 = outstanding.record(unit("K1", task_id="t-1"))
    s1 = outstanding.pushed("K1", "edi.tos", s0)
    miss_once(outstanding, "K1")
    assert outstanding.misses_of(["K1"]) == {"K1": 1}
    again = outstanding.requeued("K1", "t-1")
    assert again > s1
    assert outstanding.indexed("K1", "edi.tos") == IndexEntry("pushed", again)
    assert outstanding.misses_of(["K1"]) == {}
    assert outstanding.requeued("K1", "t-old") == 0  # another message of the unit
    assert outstanding.requeued("K-gone", "t-1") == 0
    assert outstanding.indexed("K1", "edi.tos") == IndexEntry("pushed", again)


def test_hold_keeps_the_record_but_leaves_the_index(outstanding: OutstandingStore) -> None:
    """A parked unit is in the lot: never a sweep candidate, still recorded."""
    s0 = outstanding.record(unit("K1"))
    outstanding.pushed("K1", "edi.tos", s0)
    outstanding.hold("K1")
    assert outstanding.get("K1") == unit("K1")
    assert outstanding.indexed("K1", "edi.tos") is None


def test_settle_forgets_the_unit_everywhere(outstanding: OutstandingStore) -> None:
    s0 = outstanding.record(unit("K1"))
    outstanding.record(unit("K2"))
    outstanding.pushed("K1", "edi.tos", s0)
    miss_once(outstanding, "K1")
    outstanding.settle("K1")
    outstanding.settle("K-never")  # settling an unknown key is no error
    assert outstanding.get("K1") is None
    assert outstanding.indexed("K1", "edi.tos") is None
    assert outstanding.misses_of(["K1", "K2"]) == {}
    assert len(outstanding) == 1


def test_pages_cover_every_record_once(outstanding: OutstandingStore) -> None:
    keys = {f"K{i}" for i in range(25)}
    for key in sorted(keys):
        outstanding.record(unit(key))
    seen = [u.key for page in outstanding.iter_pages(7) for u in page]
    assert sorted(seen) == sorted(keys)


# -- the orphan verdicts -----------------------------------------------------------------


def test_a_silent_worker_arms_the_sweep_and_a_retired_one_does_not(
    outstanding: OutstandingStore, clock: ManualClock
) -> None:
    """A worker killed with SIGKILL stops beating; one that stops cleanly retires.
    Silence is measured on the store's clock."""
    beat = {"dead_after_s": 10, "arm_sweeps": 3}
    assert outstanding.beat("killed", **beat) == 0
    assert outstanding.beat("stopped", **beat) == 0
    outstanding.retire("stopped")
    clock.advance(9)
    assert outstanding.beat("alive", **beat) == 0  # 9 s: not yet
    assert outstanding.take_armed_sweep() is False
    clock.advance(1)
    assert outstanding.beat("alive", **beat) == 1  # 10 s: "killed" only
    assert [outstanding.take_armed_sweep() for _ in range(4)] == [True, True, True, False]
    assert outstanding.workers() == ["alive"]


def test_an_explicit_beat_time_wins_over_the_clock(outstanding: OutstandingStore) -> None:
    assert outstanding.beat("old", dead_after_s=10, arm_sweeps=1, now_ms=1_000) == 0
    assert outstanding.beat("new", dead_after_s=10, arm_sweeps=1) == 1  # the clock: years on
    assert outstanding.workers() == ["new"]


def test_a_later_death_never_lowers_the_armed_sweeps(
    outstanding: OutstandingStore, clock: ManualClock
) -> None:
    outstanding.arm(5)
    outstanding.beat("w1", dead_after_s=1, arm_sweeps=2)
    clock.advance(2)
    assert outstanding.beat("w2", dead_after_s=1, arm_sweeps=2) == 1
    assert sum(outstanding.take_armed_sweep() for _ in range(6)) == 5


def test_a_unit_missing_from_consecutive_armed_sweeps_is_an_orphan(
    outstanding: OutstandingStore, clock: ManualClock
) -> None:
    """A worker dies; each armed sweep counts who is missing; the second miss in a row
    makes the lost unit an orphan, while a unit seen in between starts again at 0."""
    outstanding.record(unit("lost"))
    outstanding.record(unit("queued"))
    outstanding.record(unit("flaky"))
    outstanding.beat("dead", dead_after_s=10, arm_sweeps=3)
    clock.advance(11)
    assert outstanding.beat("alive", dead_after_s=10, arm_sweeps=3) == 1
    present_per_sweep = [{"id-queued"}, {"id-queued", "id-flaky"}, {"id-queued"}]
    orphans = []
    for present in present_per_sweep:
        assert outstanding.take_armed_sweep()
        units = [u for page in outstanding.iter_pages(10) for u in page]
        misses = outstanding.misses_of([u.key for u in units])
        verdict = find_orphans(units, present_task_ids=present, parked_keys=set(), misses=misses)
        back = [u.key for u in units if u.task_id in present]
        outstanding.store_misses(verdict, present=back)
        orphans.append(sorted(u.key for u in verdict.orphans))
        for orphan in verdict.orphans:
            outstanding.settle(orphan.key)  # republished under a new record in real life
    assert orphans == [[], ["lost"], []]
    assert outstanding.misses_of(["flaky", "queued"]) == {"flaky": 1}
    assert outstanding.take_armed_sweep() is False  # disarmed: the counts are gone too
    assert outstanding.misses_of(["flaky"]) == {}


def test_a_sequence_is_the_clock_in_whole_microseconds(
    outstanding: OutstandingStore, clock: ManualClock
) -> None:
    clock.advance(0.0000025)  # 2.5 µs: the sequence takes the whole µs below
    assert outstanding.record(unit("K1")) == T0_US + 2
