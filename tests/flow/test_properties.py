"""Property tests of the decision maths, and of the Lua script against it.

The ceiling property is the promise of the gate: however requests arrive, the tokens
admitted in any window of length t never exceed ``burst + rate·t``. It is checked on
the pure GCRA with an injected clock, then the Lua script is checked to make exactly
the same decisions as the Python reference on random request sequences.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.flow.backends import AcquireParams, ManualClock, Status
from tidegate.flow.backends.redis import RedisBackend
from tidegate.flow.gcra import gcra_reserve
from tidegate.keys import Keyspace

requests = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=2_000, allow_nan=False),  # ms since previous request
        st.integers(min_value=1, max_value=4),  # cost
        st.sampled_from([0.0, 0.0, 50.0, 500.0, 5_000.0]),  # max_wait_ms
    ),
    min_size=1,
    max_size=120,
)


@given(
    rate=st.floats(min_value=0.1, max_value=500, allow_nan=False),
    burst=st.integers(min_value=4, max_value=50),
    seq=requests,
)
@settings(max_examples=300, deadline=None)
def test_admissions_never_exceed_the_ceiling_in_any_window(
    rate: float, burst: int, seq: list[tuple[float, int, float]]
) -> None:
    """For every pair of admission times t1 <= t2: tokens in [t1, t2] <= burst + rate·(t2-t1)."""
    now, tat = 1_700_000_000_000.0, None
    admitted: list[tuple[float, int]] = []  # (scheduled time ms, cost)
    for gap, cost, max_wait in seq:
        now += gap
        out = gcra_reserve(tat, now, cost=cost, rate=rate, burst=burst, max_wait_ms=max_wait)
        assert out.wait_ms <= max_wait or not out.admitted
        assert out.wait_ms >= 0 or not out.admitted
        if out.admitted:
            tat = out.tat_ms
            admitted.append((now + out.wait_ms, cost))
    admitted.sort()
    times = [t for t, _ in admitted]
    costs = list(itertools.accumulate(c for _, c in admitted))
    for i, j in itertools.combinations_with_replacement(range(len(times)), 2):
        tokens = costs[j] - (costs[i - 1] if i else 0)
        window_s = (times[j] - times[i]) / 1000.0
        assert tokens <= burst + rate * (window_s + 1e-6)  # + the 1 µs rounding allowance


@given(
    rate=st.floats(min_value=0.5, max_value=200, allow_nan=False),
    burst=st.integers(min_value=1, max_value=20),
    gaps=st.lists(st.floats(min_value=0, max_value=500, allow_nan=False), max_size=40),
)
@settings(max_examples=200, deadline=None)
def test_a_refused_request_conforms_exactly_after_its_wait(
    rate: float, burst: int, gaps: list[float]
) -> None:
    """wait_ms is exact: a refused request is admitted after wait_ms, not before."""
    now, tat = 1_700_000_000_000.0, None
    for gap in gaps:
        now += gap
        out = gcra_reserve(tat, now, cost=1, rate=rate, burst=burst, max_wait_ms=0)
        if out.admitted:
            tat = out.tat_ms
            continue
        assert out.wait_ms > 1e-3
        later = gcra_reserve(tat, now + out.wait_ms, cost=1, rate=rate, burst=burst, max_wait_ms=0)
        assert later.admitted
        if out.wait_ms > 1e-2:  # ten microseconds earlier is still too early
            early = gcra_reserve(
                tat, now + out.wait_ms - 1e-2, cost=1, rate=rate, burst=burst, max_wait_ms=0
            )
            assert not early.admitted


@pytest.mark.redis
@given(
    rate=st.floats(min_value=0.5, max_value=200, allow_nan=False),
    burst=st.integers(min_value=4, max_value=20),
    seq=requests,
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_lua_script_decides_exactly_like_the_python_reference(
    redis_client: redis.Redis, prefix: str, rate: float, burst: int, seq: list[Any]
) -> None:
    """Differential test: gate_acquire.lua and gcra_reserve agree on every decision."""
    clock = ManualClock(start_ms=1_700_000_000_000.0)
    backend = RedisBackend(redis_client, clock=clock)
    keys = Keyspace(prefix).limit(f"diff-{rate}-{burst}-{len(seq)}", kind="rate")
    redis_client.delete(keys.tat)
    tat = None
    for gap, cost, max_wait in seq:
        clock.advance(gap / 1000.0)
        now = clock.now_ms()
        expected = gcra_reserve(tat, now, cost=cost, rate=rate, burst=burst, max_wait_ms=max_wait)
        got = backend.acquire(
            keys, AcquireParams(cost, rate, burst, 0, 0.0, max_wait, "", False, False)
        )
        assert (got.status is Status.ADMITTED) == expected.admitted
        assert got.wait_ms == pytest.approx(expected.wait_ms, abs=0.01)
        assert got.remaining == expected.remaining
        if expected.admitted:
            tat = expected.tat_ms
