"""The adaptive controller's core: learn a downstream's rate and concurrency.

Pure decision maths, no I/O, no clock — observations and ``now`` go in, a decision
with its reason comes out:

* :func:`decide_rate` — AIMD on 429/503 with a hard ceiling below the last 429 for
  suspension-prone downstreams, and a jump to the rate advertised in rate-limit
  headers (:class:`RateLimitHint`);
* :func:`decide_concurrency` — the latency gradient (long-window minimum over recent
  latency) for a downstream that slows down instead of refusing;
* :class:`AdaptivePolicy` — the operator's box: mode (on, frozen, off), floors,
  maxima, the suspension-prone flag.
"""

from __future__ import annotations

from tidegate.flow.adaptive._concurrency import (
    ConcurrencyDecision,
    ConcurrencyReason,
    ConcurrencyState,
    LatencyWindow,
    decide_concurrency,
    initial_concurrency_state,
)
from tidegate.flow.adaptive._hint import HintSource, RateLimitHint
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

__all__ = [
    "AdaptivePolicy",
    "ConcurrencyDecision",
    "ConcurrencyPolicy",
    "ConcurrencyReason",
    "ConcurrencyState",
    "HintSource",
    "LatencyWindow",
    "Mode",
    "RateDecision",
    "RateLimitHint",
    "RatePolicy",
    "RateReason",
    "RateState",
    "RateWindow",
    "decide_concurrency",
    "decide_rate",
    "initial_concurrency_state",
    "initial_rate_state",
]
