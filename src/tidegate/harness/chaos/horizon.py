"""The retry horizon: how long a unit keeps retrying an unavailable downstream.

The ``downstream-outage`` scenario's maths (and the benchmark's): the distribution of
the policy horizon under full-jitter backoff, and the chance that an outage of a given
length outlasts it.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from tidegate.delivery import RetryPolicy


@dataclass(frozen=True, slots=True)
class HorizonStats:
    """How long a unit keeps being retried against an unavailable downstream.

    With ``max_attempts`` attempts there are ``max_attempts - 1`` backoff delays, delay
    *i* drawn uniformly from ``[0, min(cap, base × 2**i)]`` (full jitter). Their sum
    alone can be close to 0 s, so the unit also keeps retrying until it has been
    failing for ``min_horizon_s``: the *policy horizon* is the larger of the two, and
    the unit is dead-lettered if the downstream is still down after it. Queueing
    behind the backlog and gate waits add to it, so the real time to a dead letter is
    at least this — and never less than ``min_horizon_s``.
    """

    min_horizon_s: float
    delays: int
    ceilings_s: tuple[float, ...]
    mean_s: float
    max_s: float
    p01_s: float
    p05_s: float
    p50_s: float
    p95_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _horizon_samples(policy: RetryPolicy, samples: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    ceilings = _ceilings(policy)
    return sorted(
        max(policy.min_horizon_s, sum(rng.uniform(0.0, c) for c in ceilings))
        for _ in range(samples)
    )


def _ceilings(policy: RetryPolicy) -> tuple[float, ...]:
    return tuple(
        min(policy.backoff_cap_s, policy.backoff_base_s * 2**i)
        for i in range(policy.max_attempts - 1)
    )


def retry_horizon(
    policy: RetryPolicy | None = None, *, samples: int = 50_000, seed: int = 0
) -> HorizonStats:
    """The distribution of the policy horizon (see :class:`HorizonStats`)."""
    policy = policy or RetryPolicy()
    ceilings = _ceilings(policy)
    drawn = _horizon_samples(policy, samples, seed)

    def quantile(q: float) -> float:
        return round(drawn[min(len(drawn) - 1, int(q * len(drawn)))], 2)

    return HorizonStats(
        min_horizon_s=policy.min_horizon_s,
        delays=len(ceilings),
        ceilings_s=ceilings,
        mean_s=round(sum(drawn) / len(drawn), 2),
        max_s=round(max(policy.min_horizon_s, sum(ceilings)), 2),
        p01_s=quantile(0.01),
        p05_s=quantile(0.05),
        p50_s=quantile(0.50),
        p95_s=quantile(0.95),
    )


def horizon_shorter_than(
    seconds: float, policy: RetryPolicy | None = None, *, samples: int = 50_000, seed: int = 0
) -> float:
    """P(policy horizon < ``seconds``): the chance that a unit retrying back to back
    through an outage of ``seconds`` is dead-lettered."""
    drawn = _horizon_samples(policy or RetryPolicy(), samples, seed)
    below = sum(1 for h in drawn if h < seconds)
    return round(below / len(drawn), 4)
