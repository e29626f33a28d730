"""What an operator decides about a downstream's adaptive controller, validated once.

The controllers learn a rate and a concurrency, but only inside a box the operator
draws: a floor the fleet may always send at, a maximum it never exceeds, and for a
gateway that suspends repeat offenders the promise that the rate stays below the last
point where it said 429. These are small immutable values, checked at construction, so
a nonsense setting fails where it is written, never halfway through a burst.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from tidegate.errors import ConfigurationError

__all__ = [
    "DEFAULT_CEILING_MARGIN",
    "DEFAULT_DECREASE_FACTOR",
    "DEFAULT_HEADROOM",
    "DEFAULT_MAX_QUIET_S",
    "DEFAULT_QUIET_S",
    "DEFAULT_TOLERANCE",
    "AdaptivePolicy",
    "ConcurrencyPolicy",
    "Mode",
    "RatePolicy",
]

#: ``on`` learns and retunes; ``frozen`` keeps the learned values as they are (an
#: operator investigating an incident); ``off`` leaves the gate to its static policy.
Mode: TypeAlias = Literal["on", "frozen", "off"]
_MODES: frozenset[str] = frozenset({"on", "frozen", "off"})

#: Multiplicative decrease on a rejection: botocore's adaptive retry uses 0.7.
DEFAULT_DECREASE_FACTOR = 0.7
#: The ceiling sits this fraction below the rate at which the last 429 appeared.
DEFAULT_CEILING_MARGIN = 0.9
#: Seconds without any rejection before the ceiling may be probed again (the first
#: wait; each failed probe doubles it up to :data:`DEFAULT_MAX_QUIET_S`).
DEFAULT_QUIET_S = 4.0
#: The longest wait between probes above the ceiling, seconds: it bounds how long an
#: increase of capacity (the end of a maintenance window) goes unnoticed.
DEFAULT_MAX_QUIET_S = 20.0
#: Fraction of an advertised rate used: arrival jitter on the way to the downstream
#: bunches calls, and a bucket sized exactly to the quota refuses the bunched ones.
DEFAULT_HEADROOM = 0.95
#: Gradient2's RTT tolerance: recent latency up to 1.5× the long-window minimum counts
#: as "no queue building up".
DEFAULT_TOLERANCE = 1.5


def _finite(name: str, value: float, *, low: float, high: float = math.inf) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(value) and low < value <= high):
        upper = "" if high == math.inf else f" and <= {high!r}"
        raise ConfigurationError(f"{name} must be a finite number > {low!r}{upper}, got {value!r}")


def _whole(name: str, value: int, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """The box the rate controller learns in.

    Args:
        min_rate: the floor, calls per second (> 0): the rate is never set below it.
            A downstream that throttles even the floor is waited out through its
            ``Retry-After`` (the gate's pause), not by going lower.
        max_rate: the maximum, calls per second (>= min_rate).
        start_rate: where a downstream with no learned rate starts; the floor when
            ``None``. Starting low is the point: the capacity is unknown.
        increase_per_s: additive increase, calls per second gained per second of
            saturated success (> 0), for a downstream that is not suspension-prone once
            it has refused something: plain AIMD, so a probe overshoots by one small step.
        growth_per_s: multiplicative growth, the fraction gained per second of
            saturated success (> 0), while nothing was refused yet (slow start) and, for
            a suspension-prone downstream, on the way up to its ceiling (a rate the
            downstream already accepted, so there is nothing to be careful about).
        decrease_factor: the rate is multiplied by this on a 429 or 503 (0 < f < 1).
        suspension_prone: the downstream suspends senders after repeated 429s; the
            controller then keeps a ceiling just below the last 429's rate.
        ceiling_margin: the ceiling is the 429's rate times this (0 < m < 1), or the
            rate of the last window that went through cleanly when that is lower (a
            429 met during the slow start overshot by a whole growth step).
        settle_s: for reports without admission times only: a 429 this soon after
            the 429 that set the ceiling (or failed a probe) is taken for an echo of
            the rate before the cut (a slot reserved at the old spacing, a call already
            on the wire): it cuts the rate once more by ``decrease_factor`` but leaves
            the ceiling, seconds (> 0). With admission times the echo is known, not
            guessed (``RateWindow.throttled_admitted_ms``).
        recover_s: seconds after a rejection before the rate grows again (>= 0).
        quiet_s: seconds without a rejection before the ceiling is probed (> 0): the
            ceiling is raised by ``reprobe_factor``, and if the next ``quiet_s`` pass
            without a 429 the probe worked (the next follows, the wait returns to
            ``quiet_s``); a 429 puts the ceiling back where it was and doubles the
            wait.
        max_quiet_s: the longest wait between probes (>= quiet_s): how long a capacity
            increase can go unnoticed, against one probe's 429 per ``max_quiet_s``.
        hinted_quiet_s: the wait between probes above a ceiling that a 429 set under
            a rate the headers advertise (> 0; never shorter than the current wait).
            The headers already say the capacity; what the 429 taught is how much of
            it arrivals bunched by network jitter leave against a small bucket, which
            does not change from one second to the next.
        reprobe_factor: a probe's size, ``ceiling ×`` this (1 < r <= 2). A probe that
            would come within ``min_reprobe_factor`` of the rate of a recent 429 goes
            halfway to it instead (or ``min_reprobe_factor`` above the ceiling).
        min_reprobe_factor: the smallest probe (1 < r <= reprobe_factor).
        headroom: the fraction of a rate advertised in rate-limit headers used
            (0 < h <= 1).
        max_step_s: the longest gap credited to one increase, seconds (> 0): a
            controller that was not ticking for an hour does not jump.
        probe_budget: the share of calls a failed probe may cost at a steady capacity
            (0 < b <= 1). A ceiling within the smallest probe of a recent 429 has
            nothing left to bisect, and is held ``1 / (probe_budget × ceiling)``
            seconds after that 429, between ``max_quiet_s`` and three times it (at
            10/s, 20 s; at 3/s, 60 s), or ``max_quiet_s`` when the capacity fell
            lately (it may come back). A larger budget finds a capacity that rose
            while the ceiling was held sooner.

    Warning:
        Without ``suspension_prone`` the controller is plain AIMD: it probes past the
        capacity again and again and takes a 429 each time. Mark any downstream that
        punishes that.
    """

    min_rate: float = 0.5
    max_rate: float = 100.0
    start_rate: float | None = None
    increase_per_s: float = 0.1
    growth_per_s: float = 0.5
    decrease_factor: float = DEFAULT_DECREASE_FACTOR
    suspension_prone: bool = False
    ceiling_margin: float = DEFAULT_CEILING_MARGIN
    settle_s: float = 1.5
    recover_s: float = 2.0
    quiet_s: float = DEFAULT_QUIET_S
    max_quiet_s: float = DEFAULT_MAX_QUIET_S
    hinted_quiet_s: float = 60.0
    reprobe_factor: float = 1.5
    min_reprobe_factor: float = 1.05
    headroom: float = DEFAULT_HEADROOM
    max_step_s: float = 2.0
    probe_budget: float = 0.005

    def __post_init__(self) -> None:
        _finite("min_rate", self.min_rate, low=0.0)
        _finite("max_rate", self.max_rate, low=0.0)
        if self.max_rate < self.min_rate:
            raise ConfigurationError(
                f"max_rate ({self.max_rate!r}) must be >= min_rate ({self.min_rate!r})"
            )
        if self.start_rate is not None:
            _finite("start_rate", self.start_rate, low=0.0)
            if not self.min_rate <= self.start_rate <= self.max_rate:
                raise ConfigurationError(
                    f"start_rate ({self.start_rate!r}) must lie within "
                    f"[min_rate, max_rate] = [{self.min_rate!r}, {self.max_rate!r}]"
                )
        _finite("increase_per_s", self.increase_per_s, low=0.0)
        _finite("growth_per_s", self.growth_per_s, low=0.0)
        _finite("decrease_factor", self.decrease_factor, low=0.0)
        if self.decrease_factor >= 1:
            raise ConfigurationError(
                f"decrease_factor must be < 1 (it is a cut), got {self.decrease_factor!r}"
            )
        if not isinstance(self.suspension_prone, bool):
            raise ConfigurationError(
                f"suspension_prone must be True or False, got {self.suspension_prone!r}"
            )
        _finite("ceiling_margin", self.ceiling_margin, low=0.0)
        if self.ceiling_margin >= 1:
            raise ConfigurationError(
                f"ceiling_margin must be < 1 (below the 429), got {self.ceiling_margin!r}"
            )
        _finite("settle_s", self.settle_s, low=0.0)
        if not (
            isinstance(self.recover_s, int | float)
            and not isinstance(self.recover_s, bool)
            and math.isfinite(self.recover_s)
            and self.recover_s >= 0
        ):
            raise ConfigurationError(
                f"recover_s must be a finite number >= 0, got {self.recover_s!r}"
            )
        _finite("quiet_s", self.quiet_s, low=0.0)
        _finite("max_quiet_s", self.max_quiet_s, low=0.0)
        if self.max_quiet_s < self.quiet_s:
            raise ConfigurationError(
                f"max_quiet_s ({self.max_quiet_s!r}) must be >= quiet_s ({self.quiet_s!r})"
            )
        _finite("hinted_quiet_s", self.hinted_quiet_s, low=0.0)
        _finite("reprobe_factor", self.reprobe_factor, low=1.0, high=2.0)
        _finite("min_reprobe_factor", self.min_reprobe_factor, low=1.0, high=self.reprobe_factor)
        _finite("headroom", self.headroom, low=0.0, high=1.0)
        _finite("max_step_s", self.max_step_s, low=0.0)
        _finite("probe_budget", self.probe_budget, low=0.0, high=1.0)

    @property
    def initial_rate(self) -> float:
        """The rate of a downstream nothing has been learned about."""
        return self.min_rate if self.start_rate is None else self.start_rate


@dataclass(frozen=True, slots=True)
class ConcurrencyPolicy:
    """The box the concurrency controller learns in (fleet-wide calls in flight).

    Args:
        min_concurrency: the floor (>= 1).
        max_concurrency: the maximum (>= min_concurrency).
        start_concurrency: the first limit; the floor when ``None``.
        tolerance: recent latency up to this multiple of the minimum latency is not a
            queue (>= 1).
        smoothing: the weight of a new estimate in the limit (0 < s <= 1).
        remeasure_s: how often the minimum latency is measured again, seconds (> 0).
            A minimum only comes from calls that did not queue, so the controller
            pins the limit to ``probe_concurrency`` until one window is measured at
            that level, then restores it. A downstream whose baseline really got
            slower is re-learned instead of strangled (Envoy #38338), and a queued
            latency is never mistaken for the baseline.
        probe_concurrency: the limit during a re-measurement (>= 1); the floor
            when ``None``. Kept separate from the floor (Envoy #46532 conflated them).
        probe_timeout_s: a re-measurement that gathers too few calls gives up after
            this long and keeps the old minimum, seconds (> 0).
        min_samples: windows with fewer completed calls are not judged (>= 1).
        backoff_factor: the limit is multiplied by this on a 503 or a refused
            connection (0 < f < 1).
        headroom: calls added on top of ``limit × gradient``; ``None`` uses
            ``sqrt(limit)`` (Envoy), which lets a limit grow while latency is flat.
    """

    min_concurrency: int = 1
    max_concurrency: int = 64
    start_concurrency: int | None = None
    tolerance: float = DEFAULT_TOLERANCE
    smoothing: float = 0.2
    remeasure_s: float = 300.0
    probe_concurrency: int | None = None
    probe_timeout_s: float = 30.0
    min_samples: int = 10
    backoff_factor: float = 0.9
    headroom: float | None = None

    def __post_init__(self) -> None:
        _whole("min_concurrency", self.min_concurrency, low=1)
        _whole("max_concurrency", self.max_concurrency, low=1)
        if self.max_concurrency < self.min_concurrency:
            raise ConfigurationError(
                f"max_concurrency ({self.max_concurrency!r}) must be >= "
                f"min_concurrency ({self.min_concurrency!r})"
            )
        if self.start_concurrency is not None:
            _whole("start_concurrency", self.start_concurrency, low=1)
            if not self.min_concurrency <= self.start_concurrency <= self.max_concurrency:
                raise ConfigurationError(
                    f"start_concurrency ({self.start_concurrency!r}) must lie within "
                    f"[{self.min_concurrency!r}, {self.max_concurrency!r}]"
                )
        _finite("tolerance", self.tolerance, low=0.0)
        if self.tolerance < 1:
            raise ConfigurationError(f"tolerance must be >= 1, got {self.tolerance!r}")
        _finite("smoothing", self.smoothing, low=0.0, high=1.0)
        _finite("remeasure_s", self.remeasure_s, low=0.0)
        if self.probe_concurrency is not None:
            _whole("probe_concurrency", self.probe_concurrency, low=1)
        _finite("probe_timeout_s", self.probe_timeout_s, low=0.0)
        _whole("min_samples", self.min_samples, low=1)
        _finite("backoff_factor", self.backoff_factor, low=0.0)
        if self.backoff_factor >= 1:
            raise ConfigurationError(
                f"backoff_factor must be < 1 (it is a cut), got {self.backoff_factor!r}"
            )
        if self.headroom is not None and not (
            isinstance(self.headroom, int | float)
            and not isinstance(self.headroom, bool)
            and math.isfinite(self.headroom)
            and self.headroom >= 0
        ):
            raise ConfigurationError(
                f"headroom must be a finite number >= 0 or None, got {self.headroom!r}"
            )

    @property
    def probe_limit(self) -> int:
        """The limit while the minimum latency is measured again."""
        return self.min_concurrency if self.probe_concurrency is None else self.probe_concurrency

    @property
    def initial_limit(self) -> int:
        """The limit of a downstream nothing has been learned about."""
        return self.min_concurrency if self.start_concurrency is None else self.start_concurrency


@dataclass(frozen=True, slots=True)
class AdaptivePolicy:
    """Everything an operator sets for one downstream's adaptive controller.

    Args:
        mode: ``on``, ``frozen`` (keep the learned values) or ``off``.
        rate: the rate controller's box; ``None`` leaves the rate static.
        concurrency: the concurrency controller's box; ``None`` leaves it static.

    Example::

        customs = AdaptivePolicy(rate=RatePolicy(min_rate=1, max_rate=20,
                                                 suspension_prone=True))
        tos = AdaptivePolicy(concurrency=ConcurrencyPolicy(max_concurrency=32))
    """

    mode: Mode = "on"
    rate: RatePolicy | None = field(default=None)
    concurrency: ConcurrencyPolicy | None = field(default=None)

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ConfigurationError(f"mode must be one of {sorted(_MODES)}, got {self.mode!r}")
        if self.rate is not None and not isinstance(self.rate, RatePolicy):
            raise ConfigurationError(f"rate must be a RatePolicy or None, got {self.rate!r}")
        if self.concurrency is not None and not isinstance(self.concurrency, ConcurrencyPolicy):
            raise ConfigurationError(
                f"concurrency must be a ConcurrencyPolicy or None, got {self.concurrency!r}"
            )
