"""The adaptive store and controller: one behaviour suite, on memory and on a real Redis.

Both stores run on a :class:`ManualClock`: the Redis store passes its time to the Lua
scripts as ``now_ms``, so lease expiry and takeover are stepped, never slept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from tidegate.errors import BackendError, ConfigurationError
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptiveKeys,
    AdaptivePolicy,
    AdaptiveRecord,
    AdaptiveStore,
    ConcurrencyPolicy,
    ConcurrencyState,
    LatencyWindow,
    MemoryAdaptiveStore,
    RatePolicy,
    RateState,
    RateWindow,
    RedisAdaptiveStore,
    apply_overrides,
)
from tidegate.flow.adaptive._store import decode_record
from tidegate.flow.backends import ManualClock
from tidegate.keys import Keyspace

STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
]

T0 = 1_700_000_000_000.0
TTL_MS = 10_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=T0)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, clock: ManualClock) -> AdaptiveStore:
    """A store on the shared manual clock."""
    if request.param == "memory":
        return MemoryAdaptiveStore(clock)
    return RedisAdaptiveStore(request.getfixturevalue("redis_client"), clock=clock)


@pytest.fixture
def keys(prefix: str) -> AdaptiveKeys:
    return Keyspace(prefix).adaptive("customs")


RATE = RateState(rate=4.5, ceiling=6.0, last_rejection_ms=T0, updated_ms=T0)
CONC = ConcurrencyState(limit=7.5, min_latency_ms=40.0, measured_ms=T0)


# -- the store -------------------------------------------------------------------------


def test_one_holder_at_a_time_and_takeover_after_expiry(
    store: AdaptiveStore, keys: AdaptiveKeys, clock: ManualClock
) -> None:
    """A holds; B is refused while A renews; A stops renewing; after the TTL B takes over
    and A cannot renew any more."""
    assert store.elect(keys, "A", TTL_MS)
    assert not store.elect(keys, "B", TTL_MS)
    clock.advance(8)
    assert store.elect(keys, "A", TTL_MS)  # renewed: now valid until +18 s
    clock.advance(9)
    assert not store.elect(keys, "B", TTL_MS)
    clock.advance(1.5)

    assert store.elect(keys, "B", TTL_MS)
    assert not store.elect(keys, "A", TTL_MS)


def test_resign_hands_over_at_once_and_only_for_the_holder(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """B cannot resign A's lease; A's own resign frees it for B immediately."""
    store.elect(keys, "A", TTL_MS)
    store.resign(keys, "B")
    assert not store.elect(keys, "B", TTL_MS)

    store.resign(keys, "A")
    assert store.elect(keys, "B", TTL_MS)


def test_save_is_fenced_by_the_lease(
    store: AdaptiveStore, keys: AdaptiveKeys, clock: ManualClock
) -> None:
    """Only the holder writes; a non-holder's or an expired holder's write is refused
    whole — neither the state nor the history changes."""
    store.elect(keys, "A", TTL_MS)
    assert store.save(keys, "A", AdaptiveRecord(rate=RATE), [{"reason": "first"}])

    other = AdaptiveRecord(rate=RateState(rate=99.0))
    assert not store.save(keys, "B", other, [{"reason": "intruder"}])
    clock.advance(TTL_MS / 1000 + 1)
    assert not store.save(keys, "A", other, [{"reason": "stale"}])

    assert store.load(keys) == AdaptiveRecord(rate=RATE)
    assert [event["reason"] for event in store.history(keys)] == ["first"]


def test_load_returns_what_was_saved_field_by_field(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """Nothing saved: an empty record. A rate-only save leaves the concurrency alone."""
    assert store.load(keys) == AdaptiveRecord()
    store.elect(keys, "A", TTL_MS)
    store.save(keys, "A", AdaptiveRecord(concurrency=CONC))
    store.save(keys, "A", AdaptiveRecord(rate=RATE))

    assert store.load(keys) == AdaptiveRecord(rate=RATE, concurrency=CONC)


def test_history_is_bounded_and_newest_first(store: AdaptiveStore, keys: AdaptiveKeys) -> None:
    """Five events one by one, history_max 3: the last three, newest first."""
    store.elect(keys, "A", TTL_MS)
    for i in range(5):
        store.save(keys, "A", AdaptiveRecord(), [{"seq": i}], history_max=3)

    assert store.history(keys) == [{"seq": 4}, {"seq": 3}, {"seq": 2}]
    assert store.history(keys, limit=1) == [{"seq": 4}]
    assert store.history(keys, limit=0) == []


def test_events_of_one_save_keep_their_order(store: AdaptiveStore, keys: AdaptiveKeys) -> None:
    """Two events in one save (rate and concurrency): the later one is newer."""
    store.elect(keys, "A", TTL_MS)
    store.save(keys, "A", AdaptiveRecord(), [{"kind": "rate"}, {"kind": "concurrency"}])

    assert store.history(keys) == [{"kind": "concurrency"}, {"kind": "rate"}]


def test_the_store_clock_is_the_fleet_clock(store: AdaptiveStore, clock: ManualClock) -> None:
    """now_ms is the injected clock here (Redis TIME in production)."""
    clock.advance(2.5)
    assert store.now_ms() == T0 + 2_500


@pytest.mark.parametrize("ttl_ms", [0, -5, True, float("nan"), float("inf")])
def test_a_nonsense_ttl_is_a_configuration_error(
    store: AdaptiveStore, keys: AdaptiveKeys, ttl_ms: Any
) -> None:
    """A zero TTL would mean "release" to the lease script: refused before it runs."""
    with pytest.raises(ConfigurationError):
        store.elect(keys, "A", ttl_ms)


@pytest.mark.parametrize("history_max", [0, -1, 2.5, True])
def test_a_nonsense_history_bound_is_a_configuration_error(
    store: AdaptiveStore, keys: AdaptiveKeys, history_max: Any
) -> None:
    """A zero bound would trim the whole history: refused, nothing written."""
    store.elect(keys, "A", TTL_MS)
    with pytest.raises(ConfigurationError):
        store.save(keys, "A", AdaptiveRecord(rate=RATE), history_max=history_max)
    assert store.load(keys) == AdaptiveRecord()


@pytest.mark.parametrize("name", ["", " customs", "cus{toms}"])
def test_bad_downstream_names_are_configuration_errors(name: str) -> None:
    """A name must fit in a {hash tag}."""
    with pytest.raises(ConfigurationError):
        AdaptiveKeys.build(name)


def test_keys_share_one_cluster_slot() -> None:
    """Lease, state and history carry the same {hash tag}."""
    keys = AdaptiveKeys.build("customs", prefix="tg")
    assert {k.split("{")[1].split("}")[0] for k in (keys.lease, keys.state, keys.history)} == {
        "customs"
    }
    assert keys.state == "tg:adaptive:{customs}:state"


@pytest.mark.redis
def test_an_unreadable_state_in_redis_is_a_backend_error(
    redis_client: Any, keys: AdaptiveKeys, clock: ManualClock
) -> None:
    """A hand-edited field is reported as a BackendError, not a crash deep in the maths."""
    store = RedisAdaptiveStore(redis_client, clock=clock)
    redis_client.hset(keys.state, "rate", "{not json")

    with pytest.raises(BackendError):
        store.load(keys)


@pytest.mark.parametrize(
    "fields",
    [{"rate": "{"}, {"rate": '{"rate": -1}'}, {"concurrency": "[]"}, {"rate": '"x"'}],
)
def test_decoding_garbage_is_a_backend_error(fields: dict[str, str]) -> None:
    """Every way a stored state can be wrong ends in the same typed error."""
    with pytest.raises(BackendError):
        decode_record(fields)


# -- the controller --------------------------------------------------------------------

CUSTOMS = AdaptivePolicy(rate=RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True))


@pytest.fixture
def controllers(store: AdaptiveStore, prefix: str) -> Callable[..., AdaptiveController]:
    """``controllers(policy, name)``: a controller on this test's store, holder w0, w1…"""
    made: list[AdaptiveController] = []

    def make(policy: AdaptivePolicy = CUSTOMS, name: str = "customs") -> AdaptiveController:
        controller = AdaptiveController(
            store, name, policy, prefix=prefix, holder=f"w{len(made)}", lease_ttl_s=10
        )
        made.append(controller)
        return controller

    return make


def test_only_the_elected_worker_decides_and_logs(controllers: Any) -> None:
    """Two workers tick with the same 429: one decision, one event, one history entry."""
    a, b = controllers(), controllers()
    with capture_logs() as logs:
        ticks = [a.tick(RateWindow(throttled=1)), b.tick(RateWindow(throttled=1))]

    assert ticks[1] is None
    assert ticks[0] is not None
    assert ticks[0].rate is not None
    changes = [e for e in logs if e["event"] == "adaptive_rate_changed"]
    assert len(changes) == 1
    assert changes[0]["reason"] == "throttled"
    assert changes[0]["downstream"] == "customs"
    assert [e["reason"] for e in a.history()] == ["throttled"]


def test_a_change_is_one_event_with_stable_keys(controllers: Any, clock: ManualClock) -> None:
    """The event carries the reason and before/after values; no change, no event."""
    a = controllers()
    a.tick(RateWindow(successes=5, saturated=True))  # first tick: nothing elapsed yet
    clock.advance(1)
    with capture_logs() as logs:
        a.tick(RateWindow(successes=5, saturated=True))
        a.tick(RateWindow(successes=5))  # not saturated: no change

    changes = [e for e in logs if e["event"].startswith("adaptive_")]
    assert len(changes) == 1
    assert set(changes[0]) == {
        "event",
        "log_level",
        "component",
        "downstream",
        "kind",
        "at_ms",
        "reason",
        "rate",
        "previous_rate",
        "ceiling",
        "previous_ceiling",
        "pause_s",
    }
    assert changes[0]["reason"] == "increase"
    assert changes[0]["rate"] == pytest.approx(1.5)  # the slow start: ×1.5 a second


def test_a_new_controller_starts_from_what_the_fleet_learned(
    controllers: Any, clock: ManualClock
) -> None:
    """A learns (a lone 429 at 10/s → 9/s, ceiling 9) and dies; after the TTL, B is
    elected and starts from 9/s under the ceiling of 9, not from the floor."""
    a, b = controllers(), controllers()
    a.store.elect(a.keys, a.holder, 10_000)
    a.store.save(a.keys, a.holder, AdaptiveRecord(rate=RateState(rate=10.0)))
    a.tick(RateWindow(throttled=1))
    clock.advance(11)

    with capture_logs() as logs:
        tick = b.tick(RateWindow(successes=3, saturated=True))

    elected = [e for e in logs if e["event"] == "adaptive_controller_elected"]
    assert elected
    assert elected[0]["learned_rate"] == pytest.approx(9.0)
    assert tick is not None
    assert tick.rate is not None
    assert tick.rate.previous.ceiling == pytest.approx(9.0)
    assert tick.rate.state.rate <= 9.0
    assert a.tick(RateWindow(throttled=1)) is None  # the old leader is out
    assert not a.leader


def test_stop_hands_over_at_the_next_tick(controllers: Any) -> None:
    """A clean stop resigns: B leads on its very next tick, no TTL to wait out."""
    a, b = controllers(), controllers()
    a.tick(RateWindow())
    a.stop()

    assert b.tick(RateWindow()) is not None
    assert b.leader


def test_frozen_and_off_change_nothing(controllers: Any, store: AdaptiveStore) -> None:
    """Frozen: elected, decides "frozen", no event. Off: not even elected."""
    frozen = controllers(AdaptivePolicy(mode="frozen", rate=CUSTOMS.rate))
    with capture_logs() as logs:
        tick = frozen.tick(RateWindow(throttled=5))
    assert tick is not None
    assert tick.rate is not None
    assert tick.rate.reason == "frozen"
    assert not [e for e in logs if e["event"] == "adaptive_rate_changed"]
    frozen.stop()

    off = controllers(AdaptivePolicy(mode="off", rate=CUSTOMS.rate))
    assert off.tick(RateWindow(throttled=5)) is None
    assert not off.leader
    assert store.load(off.keys).rate == RateState(rate=1.0, updated_ms=T0)  # frozen's


def test_rate_and_concurrency_decide_in_one_tick(controllers: Any) -> None:
    """A TOS policy with both: each part decides, each change is its own event."""
    policy = AdaptivePolicy(
        rate=RatePolicy(min_rate=1.0, max_rate=20.0),
        concurrency=ConcurrencyPolicy(start_concurrency=10, max_concurrency=32),
    )
    tos = controllers(policy, name="tos")
    with capture_logs() as logs:
        tick = tos.tick(RateWindow(unavailable=1), LatencyWindow(rejected=2))

    assert tick is not None
    assert tick.concurrency is not None
    assert tick.concurrency.state.concurrency == 9
    assert {e["event"] for e in logs if e["event"].endswith("_changed")} == {
        "adaptive_concurrency_changed"
    }  # the rate was already at its 1/s floor: a cut changes nothing
    assert tos.store.load(tos.keys).concurrency == tick.concurrency.state


class _Unreadable(MemoryAdaptiveStore):
    def load(self, keys: AdaptiveKeys) -> AdaptiveRecord:
        raise BackendError("unreadable adaptive state: test")


def test_an_unreadable_state_is_logged_and_learning_starts_afresh(clock: ManualClock) -> None:
    """The controller does not crash every tick on a bad record: it logs and starts over."""
    controller = AdaptiveController(_Unreadable(clock), "customs", CUSTOMS, holder="a")
    with capture_logs() as logs:
        tick = controller.tick(RateWindow(successes=2, saturated=True))

    assert tick is not None
    assert tick.rate is not None
    assert tick.rate.previous.rate == 1.0
    assert [e["event"] for e in logs if e["event"] == "adaptive_state_unreadable"]


@pytest.mark.parametrize("kwargs", [{"lease_ttl_s": 0}, {"policy": "on"}, {"history_max": 0}])
def test_nonsense_controller_settings_fail_early(kwargs: dict[str, Any]) -> None:
    """Settings are checked when the controller is built, not on its first tick."""
    args: dict[str, Any] = {"policy": CUSTOMS, **kwargs}
    with pytest.raises(ConfigurationError):
        AdaptiveController(MemoryAdaptiveStore(), "customs", **args)


@pytest.mark.parametrize("script", ["adaptive_lease", "adaptive_save"])
def test_each_script_opens_with_its_contract(script: str) -> None:
    """The header names every KEYS and ARGV entry the script reads, and its return."""
    import re
    from importlib.resources import files

    text = files("tidegate.flow.adaptive").joinpath("lua", f"{script}.lua").read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("--"))
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("--"))
    assert header.startswith(f"-- {script}:")
    assert "Returns" in header
    for used in set(re.findall(r"(KEYS|ARGV)\[(\d)\]", body)):
        assert f"{used[0]}[{used[1]}]" in header


# -- operator overrides ----------------------------------------------------------------


def test_overrides_apply_over_the_configured_policy() -> None:
    """Strings as stored in Redis become a validated policy; untouched fields stay."""
    policy = apply_overrides(
        CUSTOMS, {"mode": "frozen", "max_rate": "8", "suspension_prone": "false"}
    )

    assert policy.mode == "frozen"
    assert policy.rate is not None
    assert (policy.rate.min_rate, policy.rate.max_rate) == (1.0, 8.0)
    assert policy.rate.suspension_prone is False
    assert apply_overrides(CUSTOMS, {}) == CUSTOMS


def test_a_concurrency_override_creates_the_concurrency_part() -> None:
    """Turning a limit on for a downstream configured for rate only gives the defaults
    with the operator's bounds."""
    policy = apply_overrides(CUSTOMS, {"max_concurrency": "12"})

    assert policy.concurrency is not None
    assert policy.concurrency.max_concurrency == 12


@pytest.mark.parametrize(
    "overrides",
    [
        {"mode": "sometimes"},
        {"min_rate": "100"},  # above max_rate 50
        {"max_rate": "fast"},
        {"suspension_prone": "maybe"},
        {"min_concurrency": "2.5"},
        {"burst": "3"},  # not overridable here
    ],
)
def test_invalid_overrides_are_configuration_errors(overrides: dict[str, str]) -> None:
    """The merged policy is validated as a whole; unknown fields are refused."""
    with pytest.raises(ConfigurationError):
        apply_overrides(CUSTOMS, overrides)


def test_an_operator_freeze_reaches_the_elected_controller(
    controllers: Any, store: AdaptiveStore
) -> None:
    """A leads; the operator freezes through another worker; A's next 429 changes
    nothing; after the reset A cuts again."""
    a, operator = controllers(), controllers()
    a.tick(RateWindow())
    operator.configure(mode="frozen")

    frozen = a.tick(RateWindow(throttled=3))
    operator.reset_overrides()
    thawed = a.tick(RateWindow(throttled=3))

    assert frozen is not None
    assert frozen.rate is not None
    assert frozen.rate.reason == "frozen"
    assert thawed is not None
    assert thawed.rate is not None
    assert thawed.rate.reason == "throttled"
    assert store.read_overrides(a.keys) == {}


def test_switching_off_resigns_the_controller(controllers: Any) -> None:
    """mode=off: the leader resigns on its next tick and nobody is elected."""
    a, b = controllers(), controllers()
    a.tick(RateWindow())
    with capture_logs() as logs:
        b.configure(mode="off")
        assert a.tick(RateWindow(throttled=1)) is None
        assert b.tick(RateWindow(throttled=1)) is None

    assert not a.leader
    assert not b.leader
    assert [e["event"] for e in logs] == [
        "adaptive_policy_overridden",
        "adaptive_controller_lost",
    ]


def test_an_invalid_configure_writes_nothing(controllers: Any, store: AdaptiveStore) -> None:
    """max_rate below the floor: refused, and the earlier override stays as it was."""
    a = controllers()
    a.configure(max_rate=20)
    with pytest.raises(ConfigurationError):
        a.configure(max_rate=0.5, mode="frozen")

    assert store.read_overrides(a.keys) == {"max_rate": "20"}
    assert a.effective_policy().mode == "on"


def test_a_hand_edited_override_is_logged_and_ignored(
    controllers: Any, store: AdaptiveStore
) -> None:
    """Written past the validation (by hand): the configured policy is used."""
    a = controllers()
    store.write_overrides(a.keys, {"min_rate": "lots"})
    with capture_logs() as logs:
        policy = a.effective_policy()

    assert policy == CUSTOMS
    assert [e["event"] for e in logs] == ["adaptive_overrides_invalid"]
