"""Levels: from a queue's depth samples to a load state, a scaling signal and shedding.

The decision maths is pure — :func:`advance` maps (previous state, one depth sample,
the gate's view, the configuration) to the next :class:`LoadState` — and is property
tested. The stores only keep it: :mod:`tidegate.load.watermark_store` (the live
configuration) and :mod:`tidegate.load.board` (where the monitor publishes each state
for producers and for ``/metrics``); :mod:`tidegate.load.scaling` holds the worker
count's inputs (:class:`~tidegate.load.scaling.ScalingPolicy`,
:class:`~tidegate.load.scaling.GateView`). :mod:`tidegate.load.watermarks` re-exports
all of it under its old name.

**Hysteresis.** A queue's *level* moves between three bands. It becomes ``high``
when the depth goes above ``hwm`` and ``low`` when it falls to ``lwm`` or below; it
leaves ``high`` (or ``low``) for ``normal`` only once the depth has come back past the
middle of the band, ``(hwm + lwm) / 2``. So after the first crossing every change of
level — hence of signal — needs the depth to move by at least half the band, and a
queue hovering around one watermark (or around the middle) never flaps:

================  ==========================================================
signal            when
================  ==========================================================
``scale_out``     level ``high`` (and more workers would help)
``hold``          level ``normal``; or level ``high`` but the downstream's gate is
                  the bottleneck (paused, every lease held, workers already queued
                  for tokens): more workers would only wait longer. ``reason`` says.
``scale_in``      level ``low``: drained; the pool may shrink to ``desired_workers``
================  ==========================================================

``desired_workers = min(backlog-based, quota-based)``, clamped to the policy's range:
backlog-based is ``ceil(depth / backlog_per_worker)`` (KEDA's ``listLength``
semantics); quota-based is what the downstream's limits can keep busy
(:func:`tidegate.load.sizing.pool_size`): ``ceil(rate × (service_s + overhead_s))``
(Little's law) or, under a concurrency cap, ``ceil(cap × (service_s + overhead_s) /
service_s) + 1`` — a worker holds no connection while it waits for a lease or does its
own bookkeeping, so a pool with only as many workers as connections leaves them idle.
Past that, workers only queue for tokens or leases. ``quota_reason`` says which.

**Shedding** starts once the depth has been above ``hwm`` for ``shed_after``
consecutive samples — a brief spike never sheds — and stops only when the depth is
back at or below ``lwm`` (so it does not toggle at ``hwm`` either).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tidegate.errors import ConfigurationError
from tidegate.load.scaling import GateView, ScalingPolicy, whole_number

__all__ = [
    "DEFAULT_HWM",
    "DEFAULT_LWM",
    "DEFAULT_SHED_AFTER_INTERVALS",
    "Level",
    "LoadState",
    "Signal",
    "Watermarks",
    "advance",
]

#: Default high watermark (``TIDEGATE_QUEUE_HWM``): messages in a queue, ready + unacked.
DEFAULT_HWM = 1000
#: Default low watermark (``TIDEGATE_QUEUE_LWM``).
DEFAULT_LWM = 100
#: Consecutive samples above the HWM before sheddable documents are quarantined
#: (``TIDEGATE_SHED_AFTER_INTERVALS``).
DEFAULT_SHED_AFTER_INTERVALS = 6


class Level(enum.Enum):
    """Where a queue's depth is, with hysteresis (see the module docstring)."""

    NORMAL = "normal"
    HIGH = "high"
    LOW = "low"


class Signal(enum.Enum):
    """What the worker pool of a queue should do."""

    SCALE_OUT = "scale_out"
    HOLD = "hold"
    SCALE_IN = "scale_in"

    @property
    def direction(self) -> int:
        """+1, 0 or -1 (the ``tidegate_scaling_signal`` gauge)."""
        return {"scale_out": 1, "hold": 0, "scale_in": -1}[self.value]


@dataclass(frozen=True, slots=True)
class Watermarks:
    """The thresholds of one queue.

    Args:
        hwm: above this depth the queue is overloaded (> ``lwm``).
        lwm: at or below this depth the surge is over (>= 0).
        shed_after: consecutive samples above ``hwm`` before shedding starts (>= 1).

    Raises:
        ConfigurationError: ``lwm >= hwm``, a negative value or a fraction; the
            message names the values.
    """

    hwm: int = DEFAULT_HWM
    lwm: int = DEFAULT_LWM
    shed_after: int = DEFAULT_SHED_AFTER_INTERVALS

    def __post_init__(self) -> None:
        hwm = whole_number("QUEUE_HWM", self.hwm, 1)
        lwm = whole_number("QUEUE_LWM", self.lwm, 0)
        shed_after = whole_number("SHED_AFTER_INTERVALS", self.shed_after, 1)
        object.__setattr__(self, "hwm", hwm)
        object.__setattr__(self, "lwm", lwm)
        object.__setattr__(self, "shed_after", shed_after)
        if lwm >= hwm:
            raise ConfigurationError(
                f"queue watermarks need 0 <= LWM < HWM, got QUEUE_LWM={self.lwm!r} "
                f"QUEUE_HWM={self.hwm!r}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Watermarks:
        """The values of ``TIDEGATE_QUEUE_HWM``, ``TIDEGATE_QUEUE_LWM`` and
        ``TIDEGATE_SHED_AFTER_INTERVALS`` in ``env``.

        :attr:`tidegate.settings.Settings.watermarks` parses its snapshot with this;
        without ``env`` it reads through :meth:`Settings.load
        <tidegate.settings.Settings.load>`, so a process still reads its environment once.
        """
        if env is None:
            from tidegate.settings import Settings

            return Settings.load().watermarks
        values: dict[str, float] = {}
        for name, key in (
            ("hwm", "TIDEGATE_QUEUE_HWM"),
            ("lwm", "TIDEGATE_QUEUE_LWM"),
            ("shed_after", "TIDEGATE_SHED_AFTER_INTERVALS"),
        ):
            raw = env.get(key, "").strip()
            if raw:
                try:
                    values[name] = float(raw)
                except ValueError:
                    raise ConfigurationError(f"{key} must be a number, got {raw!r}") from None
        return cls(**values)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, int]:
        return {"hwm": self.hwm, "lwm": self.lwm, "shed_after": self.shed_after}


@dataclass(frozen=True, slots=True)
class LoadState:
    """The load of one queue after a sample.

    Attributes:
        queue: the queue.
        depth: the sampled depth (ready + unacked).
        level: high, normal or low, with hysteresis (see the module docstring).
        over_hwm_intervals: consecutive samples with the depth above ``hwm``.
        shedding: sheddable documents for this queue go to the quarantine.
        samples: samples taken so far.
        signal / reason: the scaling signal and why.
        desired_workers: ``min(backlog_workers, quota_workers)``, clamped.
        backlog_workers: what the backlog alone asks for.
        quota_workers: what the downstream's limits can use (``None``: no gate known).
        quota_reason: the arithmetic behind ``quota_workers`` (which limit binds).
        bound: the bottleneck latched from the gate (``downstream_rate`` …) or ``None``.
        free_streak: consecutive samples the gate looked free while ``bound`` is set.
    """

    queue: str
    depth: int = 0
    level: Level = Level.NORMAL
    over_hwm_intervals: int = 0
    shedding: bool = False
    samples: int = 0
    signal: Signal = Signal.HOLD
    reason: str = "no_sample"
    desired_workers: int = 0
    backlog_workers: int = 0
    quota_workers: int | None = None
    bound: str | None = None
    free_streak: int = 0
    quota_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["level"] = self.level.value
        data["signal"] = self.signal.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadState:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["level"] = Level(values.get("level", "normal"))
        values["signal"] = Signal(values.get("signal", "hold"))
        return cls(**values)


def _bound(
    previous: LoadState, gate: GateView | None, policy: ScalingPolicy
) -> tuple[str | None, int]:
    """The latched bottleneck and the free streak after this sample."""
    seen = gate.bottleneck() if gate is not None else None
    if seen is not None:
        # A saturated gate alternates between "every lease held" and "tokens queued":
        # keep the first reason while bound, unless the downstream paused us.
        return (seen if seen == "downstream_paused" else previous.bound or seen), 0
    if previous.bound is None:
        return None, 0
    streak = previous.free_streak + 1
    return (None, 0) if streak >= policy.release_after else (previous.bound, streak)


def advance(
    previous: LoadState,
    depth: int,
    marks: Watermarks,
    *,
    gate: GateView | None = None,
    policy: ScalingPolicy | None = None,
) -> LoadState:
    """The next state of a queue after one depth sample. Pure: no I/O, no clock.

    Args:
        previous: the state after the previous sample (``LoadState(queue)`` at first).
        depth: the sampled depth (ready + unacked), >= 0.
        marks: the queue's watermarks at this sample.
        gate: the queue's downstream gate at this sample, when it has one.
        policy: how depth and quota become a worker count.

    Example:
        >>> marks = Watermarks(hwm=100, lwm=10, shed_after=2)
        >>> s = advance(LoadState("q"), 150, marks)
        >>> s.signal.value, s.shedding
        ('scale_out', False)
        >>> s = advance(s, 60, marks)   # inside the band, above its middle: no flap
        >>> s.signal.value
        'scale_out'
    """
    policy = policy or ScalingPolicy()
    depth = max(0, int(depth))
    over = previous.over_hwm_intervals + 1 if depth > marks.hwm else 0
    middle = (marks.hwm + marks.lwm) / 2
    if depth > marks.hwm:
        level = Level.HIGH
    elif depth <= marks.lwm:
        level = Level.LOW
    elif previous.level is Level.HIGH:
        level = Level.HIGH if depth >= middle else Level.NORMAL
    elif previous.level is Level.LOW:
        level = Level.LOW if depth <= middle else Level.NORMAL
    else:
        level = Level.NORMAL
    shedding = depth > marks.lwm and (previous.shedding or over >= marks.shed_after)
    bound, free_streak = _bound(previous, gate, policy)

    backlog = math.ceil(depth / policy.backlog_per_worker)
    backlog = min(max(backlog, policy.min_workers), policy.max_workers)
    sized = gate.quota(policy.service_s, policy.overhead_s) if gate is not None else None
    quota = sized.workers if sized is not None else None
    desired = backlog if quota is None else min(backlog, quota)
    desired = min(max(desired, policy.min_workers), policy.max_workers)

    if level is Level.HIGH:
        signal, reason = (Signal.HOLD, bound) if bound else (Signal.SCALE_OUT, "above_hwm")
    elif level is Level.LOW:
        signal, reason = Signal.SCALE_IN, "drained_to_lwm"
    else:
        signal, reason = Signal.HOLD, "within_watermarks"
    return LoadState(
        queue=previous.queue,
        depth=depth,
        level=level,
        over_hwm_intervals=over,
        shedding=shedding,
        samples=previous.samples + 1,
        signal=signal,
        reason=reason,
        desired_workers=desired,
        backlog_workers=backlog,
        quota_workers=quota,
        bound=bound,
        free_streak=free_streak,
        quota_reason=sized.reason if sized is not None else None,
    )
