"""Operator input that would corrupt a gate is refused before anything is written.

Each case runs on memory and on a real Redis: ``Gate.configure`` and ``Gate.pause``
raise :class:`ConfigurationError` and the stored state is exactly what it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import redis

from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.flow.gate import fleet_gate_names
from tidegate.keys import Keyspace
from tidegate.settings import MAX_PAUSE_S, GatePolicy

DEFAULTS = GatePolicy(rate=2.0, burst=2, concurrency=3, lease_s=30.0)


@pytest.mark.parametrize(
    "change",
    [
        {"lease_s": 1e308},
        {"lease_s": math.inf},
        {"lease_s": math.nan},
        {"rate": 1e308},
        {"rate": math.nan},
        {"rate": 1e-300},
        {"burst": 10**23},
        {"concurrency": 10**12},
        {"rate": 5.0, "lease_s": 1e308},
    ],
    ids=repr,
)
def test_configure_refuses_out_of_range_values_and_writes_nothing(
    make: Callable[..., Any], change: dict[str, float]
) -> None:
    """A value outside its range names the field; no field of the change is stored."""
    gate = make(Gate, "customs", policy=DEFAULTS)
    before = gate.state()

    with pytest.raises(ConfigurationError, match=r"must be (a number|an integer) in \["):
        gate.configure(**change)

    assert gate.state() == before
    assert gate.state().overridden == ()


@pytest.mark.parametrize("seconds", [1e13, 1e14, MAX_PAUSE_S * 2, math.inf, math.nan, 0.0, -1.0])
def test_pause_refuses_out_of_range_seconds_and_writes_nothing(
    make: Callable[..., Any], seconds: float
) -> None:
    """A pause can only be extended, so an absurd one is refused before it is stored."""
    gate = make(Gate, "customs", policy=DEFAULTS)

    with pytest.raises(ConfigurationError, match="pause seconds"):
        gate.pause(seconds, "operator")

    assert gate.state().paused_for_s == 0.0
    assert not gate.in_use()


def test_the_longest_allowed_pause_is_stored_and_can_be_resumed(make: Callable[..., Any]) -> None:
    """The upper bound itself is a valid pause (the range is inclusive)."""
    gate = make(Gate, "customs", policy=DEFAULTS)

    remaining = gate.pause(MAX_PAUSE_S, "maintenance")
    gate.resume()

    assert remaining == pytest.approx(MAX_PAUSE_S)
    assert gate.state().paused_for_s == 0.0


@pytest.mark.redis
def test_a_corrupt_stored_value_is_shown_and_can_be_overwritten(
    redis_client: redis.Redis, prefix: str
) -> None:
    """An infinite lease stored by an older version neither breaks state() nor configure()."""
    keys = Keyspace(prefix).limit("customs")
    redis_client.hset(keys.config, mapping={"lease_ms": "inf", "rate": "4.0"})
    gate = Gate(redis_client, "customs", policy=DEFAULTS, prefix=prefix)

    corrupt = gate.state()
    fixed = gate.configure(lease_s=20.0)

    assert corrupt.invalid == {"lease_s": math.inf}
    assert corrupt.as_dict()["invalid"] == {"lease_s": "inf"}
    assert (corrupt.policy.rate, corrupt.policy.lease_s) == (4.0, DEFAULTS.lease_s)
    assert fixed.invalid == {}
    assert fixed.policy.lease_s == 20.0


@pytest.mark.redis
def test_fleet_gate_names_lists_gates_with_state_under_the_prefix_only(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Config, a pause or a bucket in use make a gate known; other prefixes and kinds do not."""
    Gate(redis_client, "customs", policy=DEFAULTS, prefix=prefix).configure(rate=1.0)
    Gate(redis_client, "tos.north", policy=DEFAULTS, prefix=prefix).pause(30, "maintenance")
    Gate(redis_client, "docstore", policy=DEFAULTS, prefix=prefix).try_acquire()
    Gate(redis_client, "elsewhere", policy=DEFAULTS, prefix=prefix + "x").configure(rate=1.0)
    redis_client.set(Keyspace(prefix).limit("limiter", kind="rate").tat, 1)

    try:
        names = fleet_gate_names(redis_client, prefix=prefix)
    finally:
        redis_client.delete(*redis_client.keys(Keyspace(prefix + "x").everything()))

    assert names == ["customs", "docstore", "tos.north"]
