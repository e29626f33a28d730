"""What a queue's worker count is sized from: the policy, and the downstream gate's view.

:func:`tidegate.load.levels.advance` takes both at each sample: the backlog asks for
``ceil(depth / backlog_per_worker)`` workers, the gate's limits say how many the
downstream can keep busy (:func:`tidegate.load.sizing.pool_size`), and a saturated gate
(:meth:`GateView.bottleneck`) turns "scale out" into "hold".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tidegate.errors import ConfigurationError
from tidegate.load.sizing import PoolSize, pool_size

__all__ = ["GateView", "ScalingPolicy", "whole_number"]


def whole_number(name: str, value: object, minimum: int) -> int:
    """``value`` as an int, or a :class:`ConfigurationError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if not math.isfinite(value) or int(value) != value or value < minimum:
        raise ConfigurationError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """How a queue's backlog and its downstream's quota turn into a worker count.

    Args:
        backlog_per_worker: messages one worker process is expected to absorb
            (KEDA ``listLength``): backlog-based workers = ``ceil(depth / this)``.
        service_s: typical duration of one downstream call, seconds — under a cap,
            the lease's whole hold (the call and what the worker does between its
            admission and its release); quota-based workers = ``ceil(rate ×
            (service_s + overhead_s))``, or under a cap ``ceil(cap × (service_s +
            overhead_s) / service_s) + 1``.
        overhead_s: what a task costs a worker outside the downstream call (ledger
            writes, ack, fetching the next message), seconds; 0 by default.
        min_workers / max_workers: the range ``desired_workers`` is clamped to.
        release_after: consecutive samples the gate must look free before a queue
            stops being "downstream-bound" (a saturated gate blinks free for an instant
            between two admissions).
    """

    backlog_per_worker: int = 50
    service_s: float = 1.0
    min_workers: int = 1
    max_workers: int = 64
    release_after: int = 3
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        whole_number("backlog_per_worker", self.backlog_per_worker, 1)
        if not (math.isfinite(self.service_s) and self.service_s > 0):
            raise ConfigurationError(f"service_s must be a finite number > 0: {self.service_s!r}")
        if not (math.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise ConfigurationError(
                f"overhead_s must be a finite number >= 0: {self.overhead_s!r}"
            )
        whole_number("min_workers", self.min_workers, 0)
        whole_number("max_workers", self.max_workers, 1)
        whole_number("release_after", self.release_after, 1)
        if self.min_workers > self.max_workers:
            raise ConfigurationError(
                f"need min_workers <= max_workers, got {self.min_workers} > {self.max_workers}"
            )


@dataclass(frozen=True, slots=True)
class GateView:
    """What the monitor read from a queue's downstream gate at the sample.

    Attributes:
        name: the gate (downstream).
        rate / burst / concurrency: its effective policy (concurrency 0 = no cap).
        paused_for_s: remaining fleet-wide pause, 0 when not paused.
        leases_held: calls in flight under the concurrency cap.
        tokens_available: tokens an admission could take right now.
        wait_s: how long a new admission would wait for its token: the reservation
            horizon (GCRA TAT) minus the burst allowance. Above one token interval,
            workers are already queued behind each other for tokens.
        relay_depth: requests a relay keeps on each connection (1: no relay); the
            pool must keep ``concurrency × relay_depth`` of them outstanding.
    """

    name: str
    rate: float
    burst: int = 1
    concurrency: int = 0
    paused_for_s: float = 0.0
    leases_held: int = 0
    tokens_available: int = 1
    wait_s: float = 0.0
    relay_depth: int = 1

    def bottleneck(self) -> str | None:
        """Why the downstream, not the worker count, limits the drain — or ``None``."""
        if self.paused_for_s > 0:
            return "downstream_paused"
        if self.concurrency > 0 and self.leases_held >= self.concurrency:
            return "downstream_concurrency"
        if self.rate > 0 and self.wait_s > 1.0 / self.rate:
            return "downstream_rate"
        return None

    def quota_workers(self, service_s: float, overhead_s: float = 0.0) -> int:
        """Workers the downstream can keep busy (see :meth:`quota`)."""
        return self.quota(service_s, overhead_s).workers

    def quota(self, service_s: float, overhead_s: float = 0.0) -> PoolSize:
        """Workers the downstream's rate or connections can keep busy, and why
        (:func:`tidegate.load.sizing.pool_size`)."""
        if self.rate <= 0 and self.concurrency <= 0:
            return PoolSize(1, "none", "no rate or concurrency limit known: 1")
        return pool_size(
            rate=self.rate,
            concurrency=self.concurrency,
            service_s=service_s,
            overhead_s=overhead_s,
            depth=self.relay_depth,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateView:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
