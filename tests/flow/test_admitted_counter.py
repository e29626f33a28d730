"""The gate counts its admissions exactly (issue #17): one ``INCRBY cost`` in the same
script that admits, so the console's chart reads a true rate rather than an estimate.

Runs on both backends (the memory twin and the real Lua script in a real Redis)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidegate.flow import Gate
from tidegate.flow.backends import ManualClock
from tidegate.flow.backends.base import AcquireParams, Status
from tidegate.keys import Keyspace
from tidegate.settings import GatePolicy


def _params(cost: int, *, max_wait_ms: float = 0.0, holder: str = "") -> AcquireParams:
    # rate 10/s, burst 5, no cap; pause and config checked: the gate's own path.
    return AcquireParams(cost, 10.0, 5, 0, 0.0, max_wait_ms, holder, True, True)


def test_counts_cost_and_reserved_slots_not_refusals(backend: Any, prefix: str) -> None:
    """Burst 5: cost 3 and cost 2 admitted now; cost 2 refused (no wait allowed); cost 2
    admitted into a reserved future slot; then refused by a pause. 3 + 2 + 2 = 7."""
    keys = Keyspace(prefix).limit("customs")
    assert backend.snapshot(keys).admitted_total == 0
    assert backend.acquire(keys, _params(3)).status is Status.ADMITTED
    assert backend.acquire(keys, _params(2)).status is Status.ADMITTED
    assert backend.snapshot(keys).admitted_total == 5
    refused = backend.acquire(keys, _params(2))
    assert refused.status is Status.RATE
    assert backend.snapshot(keys).admitted_total == 5
    reserved = backend.acquire(keys, _params(2, max_wait_ms=10_000))
    assert reserved.status is Status.ADMITTED
    assert reserved.wait_ms > 0
    assert backend.snapshot(keys).admitted_total == 7
    backend.pause(keys, 60_000, "maintenance")
    assert backend.acquire(keys, _params(1, max_wait_ms=10_000)).status is Status.PAUSED
    assert backend.snapshot(keys).admitted_total == 7


def test_a_capped_gate_counts_admissions_not_lease_refusals(backend: Any, prefix: str) -> None:
    """Concurrency 1: the first is admitted (leased), the second refused for the cap."""
    keys = Keyspace(prefix).limit("tos")
    params = AcquireParams(1, 0.0, 1, 1, 30_000.0, 0.0, "h1", True, True)
    assert backend.acquire(keys, params).status is Status.ADMITTED
    other = params._replace(holder="h2")
    assert backend.acquire(keys, other).status is Status.CONCURRENCY
    assert backend.snapshot(keys).admitted_total == 1


def test_gate_admitted_total_reads_the_counter(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """``Gate.admitted_total()``: every permit's cost, whatever the tokens left."""
    gate = make(Gate, "customs", policy=GatePolicy(rate=100.0, burst=100))
    for n in (1, 4, 2):
        with gate.acquire(n):
            pass
        clock.advance(1.0)
    assert gate.admitted_total() == 7
