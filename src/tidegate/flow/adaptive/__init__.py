"""The adaptive controller's core: learn a downstream's rate and concurrency.

Pure decision maths, no I/O, no clock — observations and ``now`` go in, a decision
with its reason comes out:

* :func:`decide_rate` — AIMD on 429/503 with a hard ceiling below the last 429 for
  suspension-prone downstreams, and a jump to the rate advertised in rate-limit
  headers (:class:`RateLimitHint`);
* :func:`decide_concurrency` — the latency gradient (the minimum latency, re-measured
  with the limit pinned low, over the recent latency) for a downstream that slows
  down instead of refusing;
* :class:`AdaptivePolicy` — the operator's box: mode (on, frozen, off), floors,
  maxima, the suspension-prone flag.

What they learn is kept behind :class:`AdaptiveStore` — :class:`RedisAdaptiveStore` for
the fleet (imported lazily), :class:`MemoryAdaptiveStore` for one process — and written
only by the worker elected by a lease: :class:`AdaptiveController` runs the election,
the maths, the fenced write and one JSON event per change. Every worker reports its
calls into a fleet-wide window; the elected one drains it each tick and applies the
result to the downstream's :class:`~tidegate.flow.Gate` (:func:`apply_tick`). In a
worker, :class:`AdaptiveReporter` is the downstream client's observer and
:class:`AdaptiveLoop` the thread that ticks (``tidegate.integrations.celery.runtime``
starts both for a downstream with ``TIDEGATE_<NAME>_ADAPTIVE`` set).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidegate.flow.adaptive._concurrency import (
    ConcurrencyDecision,
    ConcurrencyReason,
    ConcurrencyState,
    LatencyWindow,
    decide_concurrency,
    initial_concurrency_state,
)
from tidegate.flow.adaptive._controller import (
    DEFAULT_LEASE_TTL_S,
    AdaptiveController,
    ControllerTick,
)
from tidegate.flow.adaptive._fleet import DEFAULT_TICK_S, AdaptiveLoop, AdaptiveReporter
from tidegate.flow.adaptive._gate import PAUSE_REASON_QUOTA, apply_tick, gate_saturated
from tidegate.flow.adaptive._hint import HintSource, RateLimitHint
from tidegate.flow.adaptive._observe import CallOutcome, Observations, windows
from tidegate.flow.adaptive._overrides import OVERRIDABLE, apply_overrides
from tidegate.flow.adaptive._policy import (
    AdaptivePolicy,
    ConcurrencyPolicy,
    Mode,
    RatePolicy,
)
from tidegate.flow.adaptive._rate import (
    RateDecision,
    RateReason,
    RateState,
    RateWindow,
    decide_rate,
    initial_rate_state,
)
from tidegate.flow.adaptive._store import (
    DEFAULT_HISTORY_MAX,
    AdaptiveKeys,
    AdaptiveRecord,
    AdaptiveStore,
    MemoryAdaptiveStore,
)

if TYPE_CHECKING:
    from tidegate.flow.adaptive._redis import RedisAdaptiveStore

__all__ = [
    "DEFAULT_HISTORY_MAX",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_TICK_S",
    "OVERRIDABLE",
    "PAUSE_REASON_QUOTA",
    "AdaptiveController",
    "AdaptiveKeys",
    "AdaptiveLoop",
    "AdaptivePolicy",
    "AdaptiveRecord",
    "AdaptiveReporter",
    "AdaptiveStore",
    "CallOutcome",
    "ConcurrencyDecision",
    "ConcurrencyPolicy",
    "ConcurrencyReason",
    "ConcurrencyState",
    "ControllerTick",
    "HintSource",
    "LatencyWindow",
    "MemoryAdaptiveStore",
    "Mode",
    "Observations",
    "RateDecision",
    "RateLimitHint",
    "RatePolicy",
    "RateReason",
    "RateState",
    "RateWindow",
    "RedisAdaptiveStore",
    "apply_overrides",
    "apply_tick",
    "decide_concurrency",
    "decide_rate",
    "gate_saturated",
    "initial_concurrency_state",
    "initial_rate_state",
    "windows",
]


def __getattr__(name: str) -> Any:
    if name == "RedisAdaptiveStore":
        from tidegate.flow.adaptive._redis import RedisAdaptiveStore

        return RedisAdaptiveStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
