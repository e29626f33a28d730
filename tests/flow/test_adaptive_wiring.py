"""The controller in the workers: settings, the tick loop and its hand-over, the gauges.

Real Redis; the loops are ticked by hand (``AdaptiveLoop.tick``) so nothing sleeps,
except where the loop's own thread is the point.
"""

from __future__ import annotations

import time

import pytest
import redis

from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptiveLoop,
    AdaptivePolicy,
    AdaptiveReporter,
    RatePolicy,
    RedisAdaptiveStore,
)
from tidegate.keys import Keyspace
from tidegate.ops.metrics import registry_for
from tidegate.settings import GatePolicy, adaptive_policy_from_env

pytestmark = pytest.mark.redis

POLICY = AdaptivePolicy(rate=RatePolicy(min_rate=1.0, max_rate=20.0, suspension_prone=True))


def test_no_adaptive_setting_means_no_controller() -> None:
    """Without TIDEGATE_<NAME>_ADAPTIVE the gate keeps its static rate."""
    assert adaptive_policy_from_env("customs", {"TIDEGATE_CUSTOMS_RATE": "3"}) is None


def test_the_environment_draws_the_box() -> None:
    """Mode, rate box, the flag and a concurrency box, from TIDEGATE_<NAME>_*."""
    policy = adaptive_policy_from_env(
        "customs",
        {
            "TIDEGATE_CUSTOMS_ADAPTIVE": "freeze",
            "TIDEGATE_CUSTOMS_MIN_RATE": "0.5",
            "TIDEGATE_CUSTOMS_MAX_RATE": "12",
            "TIDEGATE_CUSTOMS_SUSPENSION_PRONE": "yes",
            "TIDEGATE_CUSTOMS_MAX_CONCURRENCY": "8",
        },
    )

    assert policy is not None
    assert policy.mode == "frozen"
    assert policy.rate is not None
    assert (policy.rate.min_rate, policy.rate.max_rate) == (0.5, 12.0)
    assert policy.rate.suspension_prone
    assert policy.concurrency is not None
    assert policy.concurrency.max_concurrency == 8


@pytest.mark.parametrize(
    "env",
    [
        {"TIDEGATE_CUSTOMS_ADAPTIVE": "sometimes"},
        {"TIDEGATE_CUSTOMS_ADAPTIVE": "on", "TIDEGATE_CUSTOMS_MIN_RATE": "fast"},
        {
            "TIDEGATE_CUSTOMS_ADAPTIVE": "on",
            "TIDEGATE_CUSTOMS_MIN_RATE": "9",
            "TIDEGATE_CUSTOMS_MAX_RATE": "3",
        },
        {"TIDEGATE_CUSTOMS_ADAPTIVE": "on", "TIDEGATE_CUSTOMS_SUSPENSION_PRONE": "maybe"},
        {"TIDEGATE_CUSTOMS_ADAPTIVE": "on", "TIDEGATE_CUSTOMS_MAX_CONCURRENCY": "2.5"},
    ],
)
def test_nonsense_settings_are_configuration_errors(env: dict[str, str]) -> None:
    """A typo in a worker's environment fails at start, with the variable named."""
    with pytest.raises(ConfigurationError):
        adaptive_policy_from_env("customs", env)


def _loop(client: redis.Redis, prefix: str, holder: str) -> AdaptiveLoop:
    store = RedisAdaptiveStore(client)
    controller = AdaptiveController(store, "customs", POLICY, prefix=prefix, holder=holder)
    gate = Gate(client, "customs", policy=GatePolicy(rate=1.0), prefix=prefix)
    return AdaptiveLoop(controller, gate)


def test_one_loop_leads_and_another_takes_over_when_it_stops(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Two workers' loops: the first to tick leads and retunes the gate from the
    reports; the other does nothing. When the leader stops (resigns) the other's next
    tick takes over, from the state the first learned."""
    first, second = _loop(redis_client, prefix, "w1"), _loop(redis_client, prefix, "w2")
    reporter = AdaptiveReporter(second.controller, second.gate)
    keys = Keyspace(prefix).adaptive("customs")
    store = RedisAdaptiveStore(redis_client)

    first.tick()
    second.tick()
    assert store.leader(keys) == "w1"
    reporter.observe("throttled", latency_ms=None, hint=None)
    first.tick()
    learned = store.load(keys).rate
    assert learned is not None
    assert learned.ceiling is not None  # a 429 at the floor: ceiling at the floor

    first.stop()
    second.tick()

    assert store.leader(keys) == "w2"
    assert second.controller.leader
    took_over = second.controller.record.rate
    assert took_over is not None
    assert (took_over.rate, took_over.ceiling) == (learned.rate, learned.ceiling)


def test_the_gauges_show_the_learned_rate_and_ceiling(
    redis_client: redis.Redis, prefix: str
) -> None:
    """tidegate_adaptive_rate / _ceiling / _controller from the state in Redis."""
    loop = _loop(redis_client, prefix, "w1")
    loop.tick()
    AdaptiveReporter(loop.controller).observe("throttled", latency_ms=None, hint=None)
    loop.tick()
    registry = registry_for(redis_client, prefix=prefix)

    assert registry.get_sample_value("tidegate_adaptive_rate", {"downstream": "customs"}) == 1.0
    assert registry.get_sample_value("tidegate_adaptive_ceiling", {"downstream": "customs"}) == 1.0
    assert registry.get_sample_value("tidegate_adaptive_controller", {"downstream": "customs"}) == 1
    loop.stop()
    assert registry.get_sample_value("tidegate_adaptive_controller", {"downstream": "customs"}) == 0


def test_the_loop_thread_ticks_and_stops(redis_client: redis.Redis, prefix: str) -> None:
    """start() runs the tick in a named daemon thread; stop() ends it and resigns."""
    loop = _loop(redis_client, prefix, "w1")
    loop.start()
    loop.stop()

    assert loop._thread is not None
    assert not loop._thread.is_alive()
    assert RedisAdaptiveStore(redis_client).leader(Keyspace(prefix).adaptive("customs")) is None


def test_the_leading_loop_decides_on_a_429_at_once_not_at_its_next_tick(
    redis_client: redis.Redis, prefix: str
) -> None:
    """A loop that ticks once a minute, leading: a 429 reported by any worker wakes it,
    and the cut (with its ceiling) is stored and applied to the gate long before the
    next tick. The fleet's pause for that 429 lasts its Retry-After, often 1 s: a cut
    made at the next tick may come after calls went out again at the old rate."""
    store = RedisAdaptiveStore(redis_client)
    policy = AdaptivePolicy(
        rate=RatePolicy(min_rate=1.0, max_rate=20.0, start_rate=8.0, suspension_prone=True)
    )
    controller = AdaptiveController(store, "customs", policy, prefix=prefix, holder="w1")
    gate = Gate(redis_client, "customs", policy=GatePolicy(rate=8.0), prefix=prefix)
    loop = AdaptiveLoop(controller, gate, tick_s=60.0)
    keys = Keyspace(prefix).adaptive("customs")
    loop.start()
    try:
        deadline = time.monotonic() + 10.0
        while store.leader(keys) != "w1" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.leader(keys) == "w1", "the loop never took the lease"
        before = store.load(keys).rate
        assert before is None or before.ceiling is None

        AdaptiveReporter(controller).observe("throttled", latency_ms=None, hint=None)
        learned = None
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            learned = store.load(keys).rate
            if learned is not None and learned.ceiling is not None:
                break
            time.sleep(0.01)
    finally:
        loop.stop()

    assert learned is not None, "no decision before the tick"
    assert learned.ceiling is not None, "no cut before the tick"
    assert learned.rate < 8.0
    assert gate.state().policy.rate == pytest.approx(learned.rate)
