"""The live watermarks and the load board, held on the memory twins and on Redis alike:
overrides over defaults (per queue over global), validated retunes, levels that cross
the watermarks with hysteresis as the live values say, and board entries aged on the
board's clock until they go stale."""

from __future__ import annotations

import pytest

from tidegate.errors import ConfigurationError
from tidegate.flow.backends import ManualClock
from tidegate.load.depth import QueueDepth
from tidegate.load.protocols import LoadBoardStore, WatermarkConfigStore
from tidegate.load.watermarks import (
    BoardEntry,
    GateView,
    Level,
    LoadState,
    Signal,
    Watermarks,
    advance,
)

DEFAULTS = Watermarks(hwm=1000, lwm=100, shed_after=3)


def test_both_stores_follow_the_protocols(
    watermark_store: WatermarkConfigStore, board: LoadBoardStore
) -> None:
    assert isinstance(watermark_store, WatermarkConfigStore)
    assert isinstance(board, LoadBoardStore)


# -- the live configuration ------------------------------------------------------------


def test_without_overrides_every_queue_has_the_defaults(
    watermark_store: WatermarkConfigStore,
) -> None:
    assert watermark_store.defaults == DEFAULTS
    assert watermark_store.get() == DEFAULTS
    assert watermark_store.get_many(["a", "b"]) == {"a": DEFAULTS, "b": DEFAULTS}
    assert watermark_store.overrides() == {}


def test_watermarks_are_retuned_live_and_validated(watermark_store: WatermarkConfigStore) -> None:
    """Overrides win over the defaults; per queue over global; an invalid retune raises
    with the values and stores nothing."""
    store = watermark_store
    assert store.configure(hwm=500) == Watermarks(hwm=500, lwm=100, shed_after=3)
    store.configure(queue="edi.customs", lwm=300)
    assert store.get() == Watermarks(hwm=500, lwm=100, shed_after=3)
    assert store.get("edi.customs") == Watermarks(hwm=500, lwm=300, shed_after=3)
    with pytest.raises(ConfigurationError, match="QUEUE_LWM=600 QUEUE_HWM=500"):
        store.configure(queue="edi.tos", lwm=600)
    with pytest.raises(ConfigurationError, match="QUEUE_LWM=300 QUEUE_HWM=200"):
        store.configure(hwm=200)  # global change that would break edi.customs' override
    with pytest.raises(ConfigurationError, match="nothing to change"):
        store.configure()
    assert store.overrides() == {"hwm": 500.0, "lwm@edi.customs": 300.0}
    assert store.get_many(["edi.customs", "edi.tos"]) == {
        "edi.customs": Watermarks(hwm=500, lwm=300, shed_after=3),
        "edi.tos": Watermarks(hwm=500, lwm=100, shed_after=3),
    }
    store.reset("edi.customs")
    assert store.get("edi.customs") == Watermarks(hwm=500, lwm=100, shed_after=3)
    store.reset()
    assert store.overrides() == {}
    assert store.get("edi.customs") == DEFAULTS


def test_a_queue_override_of_every_field_wins_over_the_global_one(
    watermark_store: WatermarkConfigStore,
) -> None:
    watermark_store.configure(hwm=2000, lwm=200, shed_after=5)
    watermark_store.configure(queue="bulk", hwm=50, lwm=5, shed_after=1)
    assert watermark_store.get("bulk") == Watermarks(hwm=50, lwm=5, shed_after=1)
    assert watermark_store.get("other") == Watermarks(hwm=2000, lwm=200, shed_after=5)


# -- levels with hysteresis, judged with the live values --------------------------------


def _levels(store: WatermarkConfigStore, queue: str, depths: list[int]) -> list[Level]:
    state, levels = LoadState(queue), []
    for depth in depths:
        state = advance(state, depth, store.get(queue))
        levels.append(state.level)
    return levels


def test_levels_cross_the_watermarks_up_and_down_with_hysteresis(
    watermark_store: WatermarkConfigStore,
) -> None:
    """hwm=100, lwm=20 (middle 60): high above 100, back to normal only below 60;
    low at 20 or below, back to normal only above 60."""
    watermark_store.configure(queue="q", hwm=100, lwm=20)
    H, N, L = Level.HIGH, Level.NORMAL, Level.LOW
    depths = [50, 101, 100, 60, 59, 20, 21, 60, 61, 100, 101]
    assert _levels(watermark_store, "q", depths) == [N, H, H, H, N, L, L, L, N, N, H]


def test_a_live_retune_moves_the_same_depth_to_another_level(
    watermark_store: WatermarkConfigStore,
) -> None:
    state = advance(LoadState("q"), 400, watermark_store.get("q"))
    assert (state.level, state.signal) == (Level.NORMAL, Signal.HOLD)
    watermark_store.configure(queue="q", hwm=300, lwm=30)
    state = advance(state, 400, watermark_store.get("q"))
    assert (state.level, state.signal) == (Level.HIGH, Signal.SCALE_OUT)
    watermark_store.reset("q")
    state = advance(state, 400, watermark_store.get("q"))
    assert state.level is Level.NORMAL  # 400 < middle of 1000/100: out of high


# -- the board -------------------------------------------------------------------------


def _entry(
    queue: str, depth: int, sampled_at_ms: float, *, gate: GateView | None = None
) -> BoardEntry:
    marks = Watermarks(hwm=10, lwm=2, shed_after=1)
    state = advance(LoadState(queue), depth, marks, gate=gate)
    return BoardEntry(state, QueueDepth(queue, depth - 5, 5, 2), marks, gate, sampled_at_ms, 1.0)


def test_the_board_carries_the_whole_entry_and_ages_it_on_its_clock(
    board: LoadBoardStore, clock: ManualClock
) -> None:
    gate = GateView("customs", rate=2.0, burst=1, concurrency=3, leases_held=3)
    published = _entry("q", 50, board.now_ms(), gate=gate)
    board.publish([published])
    entry = board.read(["q", "absent"])["q"]
    assert entry == published
    assert (entry.depth.ready, entry.depth.unacked, entry.depth.consumers) == (45, 5, 2)
    assert entry.state.shedding
    assert entry.age_s == 0.0
    assert entry.fresh()
    clock.advance(2.5)
    assert board.read(["q"])["q"].age_s == 2.5
    assert board.read()["q"].fresh()
    clock.advance(0.6)  # 3.1 s with a 1 s interval: stale
    assert not board.read()["q"].fresh()


def test_the_board_clock_is_the_injected_one(board: LoadBoardStore, clock: ManualClock) -> None:
    assert board.now_ms() == 1_700_000_000_000.0
    clock.advance(1.0)
    assert board.now_ms() == 1_700_000_001_000.0


def test_a_newer_entry_replaces_the_older_one_and_clear_forgets_all(
    board: LoadBoardStore, clock: ManualClock
) -> None:
    board.publish([_entry("a", 50, board.now_ms()), _entry("b", 1, board.now_ms())])
    clock.advance(5)
    board.publish([_entry("a", 3, board.now_ms())])
    read = board.read()
    assert sorted(read) == ["a", "b"]
    assert (read["a"].state.depth, read["a"].age_s) == (3, 0.0)
    assert (read["b"].state.level, read["b"].age_s) == (Level.LOW, 5.0)
    board.publish([])  # nothing to publish changes nothing
    assert sorted(board.read()) == ["a", "b"]
    board.clear()
    assert board.read() == {}
    assert board.read(["a"]) == {}


def test_an_entry_sampled_after_the_read_clock_is_never_negative_age(
    board: LoadBoardStore,
) -> None:
    """Another monitor's clock a little ahead: the age is 0, not negative."""
    board.publish([_entry("q", 50, board.now_ms() + 800)])
    assert board.read()["q"].age_s == 0.0
