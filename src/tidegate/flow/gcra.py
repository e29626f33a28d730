"""GCRA, the decision maths of the rate limit, free of I/O.

The Generic Cell Rate Algorithm keeps one number per limit, the *theoretical arrival
time* (TAT): the moment the bucket would be full again. A request of ``cost`` tokens at
``now`` conforms when ``max(TAT, now) + cost·T − burst·T ≤ now`` (``T = 1/rate``). It is a
token bucket stored as a single timestamp, so one atomic read-modify-write in Redis
makes a fleet-wide decision, and the wait until a non-conforming request *would*
conform falls out of the same subtraction.

The same maths runs in ``backends/lua/gate_acquire.lua`` (Redis) and here (the memory
backend, and the reference the Lua script is property-tested against).

Guarantee: over any interval of length ``t`` starting from a full bucket, admitted
tokens ≤ ``burst + rate·t``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["GcraOutcome", "gcra_reserve"]

#: Epoch-millisecond doubles have an ulp of ~2e-4 ms, so a wait under one microsecond
#: is rounding noise, not a reason to refuse (it admits at most 1 µs worth of tokens).
_EPSILON_MS = 1e-3


class GcraOutcome(NamedTuple):
    """What one GCRA decision concluded.

    Attributes:
        admitted: the request is admitted (possibly in the future, ``wait_ms`` away).
        wait_ms: when admitted, how long until the reserved slot; when refused, how
            long until the request would conform.
        remaining: whole tokens left at the admission time (refused: tokens now).
        tat_ms: the TAT to store; unchanged when refused.
    """

    admitted: bool
    wait_ms: float
    remaining: int
    tat_ms: float


def gcra_reserve(
    tat_ms: float | None,
    now_ms: float,
    *,
    cost: int,
    rate: float,
    burst: int,
    max_wait_ms: float,
) -> GcraOutcome:
    """Decide one request and, if admitted within ``max_wait_ms``, reserve its slot.

    Args:
        tat_ms: the stored TAT, or ``None`` for a fresh (full) bucket.
        now_ms: the current time of the fleet clock, in ms.
        cost: tokens this request takes (1 ≤ cost ≤ burst).
        rate: sustained admissions per second (> 0).
        burst: bucket size in tokens (≥ 1).
        max_wait_ms: the furthest in the future a slot may be reserved; 0 admits only
            a request that conforms now.
    """
    interval = 1000.0 / rate
    tat = now_ms if tat_ms is None or tat_ms < now_ms else tat_ms
    new_tat = tat + cost * interval
    # (tat - now) first: exactly 0 when the bucket is full and cost == burst.
    wait = (tat - now_ms) - (burst - cost) * interval
    if wait <= _EPSILON_MS:
        wait = min(wait, 0.0)
    if wait > max_wait_ms:
        left = max(0, math.floor((now_ms + burst * interval - tat) / interval))
        return GcraOutcome(False, wait, left, tat_ms if tat_ms is not None else now_ms)
    if wait < 0:
        return GcraOutcome(True, 0.0, math.floor(-wait / interval), new_tat)
    return GcraOutcome(True, wait, 0, new_tat)
