"""Watermarks: from a queue's depth samples to a load state, a scaling signal and shedding.

The decision maths is pure — :func:`advance` maps (previous state, one depth sample,
the gate's view, the configuration) to the next :class:`LoadState` — and is property
tested; the Redis halves (:class:`WatermarkStore` for the live configuration,
:class:`LoadBoard` where the monitor publishes each state for producers and for
``/metrics``) only store and load it.

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
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import redis

from tidegate._redis import map_redis_errors
from tidegate.errors import ConfigurationError
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load.depth import QueueDepth
from tidegate.load.sizing import PoolSize, pool_size
from tidegate.logging import get_logger

__all__ = [
    "DEFAULT_HWM",
    "DEFAULT_LWM",
    "DEFAULT_SHED_AFTER_INTERVALS",
    "BoardEntry",
    "GateView",
    "Level",
    "LoadBoard",
    "LoadState",
    "ScalingPolicy",
    "Signal",
    "WatermarkStore",
    "Watermarks",
    "advance",
]

log = get_logger("tidegate.load")

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


def _whole(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if not math.isfinite(value) or int(value) != value or value < minimum:
        raise ConfigurationError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


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
        hwm = _whole("QUEUE_HWM", self.hwm, 1)
        lwm = _whole("QUEUE_LWM", self.lwm, 0)
        shed_after = _whole("SHED_AFTER_INTERVALS", self.shed_after, 1)
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
        """Defaults from ``TIDEGATE_QUEUE_HWM``, ``TIDEGATE_QUEUE_LWM`` and
        ``TIDEGATE_SHED_AFTER_INTERVALS``."""
        source = os.environ if env is None else env
        values: dict[str, float] = {}
        for name, key in (
            ("hwm", "TIDEGATE_QUEUE_HWM"),
            ("lwm", "TIDEGATE_QUEUE_LWM"),
            ("shed_after", "TIDEGATE_SHED_AFTER_INTERVALS"),
        ):
            raw = source.get(key, "").strip()
            if raw:
                try:
                    values[name] = float(raw)
                except ValueError:
                    raise ConfigurationError(f"{key} must be a number, got {raw!r}") from None
        return cls(**values)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, int]:
        return {"hwm": self.hwm, "lwm": self.lwm, "shed_after": self.shed_after}


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """How a queue's backlog and its downstream's quota turn into a worker count.

    Args:
        backlog_per_worker: messages one worker process is expected to absorb
            (KEDA ``listLength``): backlog-based workers = ``ceil(depth / this)``.
        service_s: typical duration of one downstream call, seconds; quota-based
            workers = ``ceil(rate × (service_s + overhead_s))``, or under a cap
            ``ceil(cap × (service_s + overhead_s) / service_s) + 1``.
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
        _whole("backlog_per_worker", self.backlog_per_worker, 1)
        if not (math.isfinite(self.service_s) and self.service_s > 0):
            raise ConfigurationError(f"service_s must be a finite number > 0: {self.service_s!r}")
        if not (math.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise ConfigurationError(
                f"overhead_s must be a finite number >= 0: {self.overhead_s!r}"
            )
        _whole("min_workers", self.min_workers, 0)
        _whole("max_workers", self.max_workers, 1)
        _whole("release_after", self.release_after, 1)
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
    """

    name: str
    rate: float
    burst: int = 1
    concurrency: int = 0
    paused_for_s: float = 0.0
    leases_held: int = 0
    tokens_available: int = 1
    wait_s: float = 0.0

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
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateView:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


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


# --- Redis: the live configuration and the board ----------------------------------------

_FIELDS = ("hwm", "lwm", "shed_after")


class WatermarkStore:
    """The live watermarks, fleet-wide: defaults from the environment, overrides in Redis.

    Like the gate's policy, values set here (``tidegate watermarks set``) win over the
    environment without a restart. Overrides can be global or per queue; a per-queue
    value wins over a global one.

    Args:
        client: a sync Redis client.
        prefix: key prefix (one hash, ``<prefix>:{load}:watermarks``).
        defaults: the environment's values (:meth:`Watermarks.from_env` when omitted).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        defaults: Watermarks | None = None,
    ) -> None:
        self.client = client
        self.defaults = defaults if defaults is not None else Watermarks.from_env()
        self.key = Keyspace(prefix).watermarks()

    def _raw(self) -> dict[str, float]:
        with map_redis_errors("read watermarks"):
            raw = cast("dict[bytes, bytes]", self.client.hgetall(self.key))
        return {k.decode(): float(v) for k, v in raw.items()}

    @staticmethod
    def _effective(defaults: Watermarks, raw: Mapping[str, float], queue: str | None) -> Watermarks:
        values: dict[str, float] = {k: float(v) for k, v in defaults.as_dict().items()}
        for name in _FIELDS:
            if name in raw:
                values[name] = raw[name]
            if queue is not None and f"{name}@{queue}" in raw:
                values[name] = raw[f"{name}@{queue}"]
        return Watermarks(**values)  # type: ignore[arg-type]

    def get(self, queue: str | None = None) -> Watermarks:
        """The effective watermarks of ``queue`` (or the global ones)."""
        return self._effective(self.defaults, self._raw(), queue)

    def get_many(self, queues: Iterable[str]) -> dict[str, Watermarks]:
        """The effective watermarks of several queues, in one read."""
        raw = self._raw()
        return {queue: self._effective(self.defaults, raw, queue) for queue in queues}

    def overrides(self) -> dict[str, float]:
        """The values stored in Redis (``hwm``, ``hwm@edi.customs`` …)."""
        return self._raw()

    def configure(
        self,
        *,
        queue: str | None = None,
        hwm: int | None = None,
        lwm: int | None = None,
        shed_after: int | None = None,
    ) -> Watermarks:
        """Retune the running fleet; validated against every queue it affects.

        Raises:
            ConfigurationError: nothing to change, or the result would be invalid
                (e.g. ``lwm >= hwm``) for this queue or, for a global change, for any
                queue with its own overrides.
        """
        given = (("hwm", hwm), ("lwm", lwm), ("shed_after", shed_after))
        changes = {name: value for name, value in given if value is not None}
        if not changes:
            raise ConfigurationError("nothing to change: give hwm, lwm or shed_after")
        suffix = f"@{queue}" if queue is not None else ""
        raw = self._raw()
        updated = {**raw, **{f"{k}{suffix}": float(v) for k, v in changes.items()}}
        result = self._effective(self.defaults, updated, queue)
        for other in {k.split("@", 1)[1] for k in updated if "@" in k}:
            self._effective(self.defaults, updated, other)
        with map_redis_errors("configure watermarks"):
            self.client.hset(self.key, mapping={f"{k}{suffix}": v for k, v in changes.items()})
        log.warning("queue_watermarks_configured", queue=queue, **changes)
        return result

    def reset(self, queue: str | None = None) -> None:
        """Drop the Redis overrides of ``queue`` (or every override)."""
        with map_redis_errors("reset watermarks"):
            if queue is None:
                self.client.delete(self.key)
            else:
                self.client.hdel(self.key, *(f"{name}@{queue}" for name in _FIELDS))
        log.warning("queue_watermarks_reset", queue=queue)


@dataclass(frozen=True, slots=True)
class BoardEntry:
    """What the monitor published about one queue at one sample.

    Attributes:
        state: the load state after the sample.
        depth: the raw sample (ready / unacked / consumers).
        marks: the watermarks the sample was judged with.
        gate: the downstream gate's view, when the queue has one.
        sampled_at_ms: Redis ``TIME`` at the sample, ms since the epoch.
        interval_s: the monitor's sampling period.
        age_s: seconds since the sample (Redis clock), set when read.
    """

    state: LoadState
    depth: QueueDepth
    marks: Watermarks
    gate: GateView | None = None
    sampled_at_ms: float = 0.0
    interval_s: float = 1.0
    age_s: float = field(default=0.0, compare=False)

    def fresh(self, *, periods: float = 3.0) -> bool:
        """Whether the monitor sampled within ``periods`` sampling periods."""
        return self.age_s <= periods * self.interval_s

    def to_json(self) -> str:
        return json.dumps(
            {
                "state": self.state.as_dict(),
                "depth": {
                    "ready": self.depth.ready,
                    "unacked": self.depth.unacked,
                    "consumers": self.depth.consumers,
                },
                "marks": self.marks.as_dict(),
                "gate": self.gate.as_dict() if self.gate is not None else None,
                "sampled_at_ms": self.sampled_at_ms,
                "interval_s": self.interval_s,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes, now_ms: float) -> BoardEntry:
        data = json.loads(raw)
        state = LoadState.from_dict(data["state"])
        depth = data["depth"]
        sampled = float(data["sampled_at_ms"])
        return cls(
            state=state,
            depth=QueueDepth(state.queue, depth["ready"], depth["unacked"], depth["consumers"]),
            marks=Watermarks(**data["marks"]),
            gate=GateView.from_dict(data["gate"]) if data.get("gate") else None,
            sampled_at_ms=sampled,
            interval_s=float(data["interval_s"]),
            age_s=max(0.0, (now_ms - sampled) / 1000.0),
        )


class LoadBoard:
    """Where the monitor publishes each queue's latest :class:`BoardEntry`.

    Producers read it to decide shedding (the monitor is the one sampler, so
    "N consecutive samples" means the same thing fleet-wide) and ``/metrics`` reads it
    to export. One hash, ``<prefix>:{load}:board``, queue → entry JSON.
    """

    def __init__(self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = client
        self.key = Keyspace(prefix).load_board()

    def now_ms(self) -> float:
        """The fleet clock (Redis ``TIME``), ms since the epoch."""
        with map_redis_errors("board clock"):
            seconds, micros = self.client.time()
        return seconds * 1000.0 + micros / 1000.0

    def publish(self, entries: Sequence[BoardEntry]) -> None:
        if not entries:
            return
        with map_redis_errors("publish load"):
            self.client.hset(
                self.key, mapping={entry.state.queue: entry.to_json() for entry in entries}
            )

    def read(self, queues: Sequence[str] | None = None) -> dict[str, BoardEntry]:
        """The latest entries (all, or of ``queues``), with their age on the fleet clock."""
        with map_redis_errors("read load"):
            pipe = self.client.pipeline(transaction=False)
            if queues is None:
                pipe.hgetall(self.key)
            else:
                pipe.hmget(self.key, list(queues))
            pipe.time()
            raw, (seconds, micros) = pipe.execute()
        now_ms = seconds * 1000.0 + micros / 1000.0
        if queues is None:
            items = [(k.decode(), v) for k, v in raw.items()]
        else:
            items = [(q, v) for q, v in zip(queues, raw, strict=True) if v is not None]
        return {queue: BoardEntry.from_json(value, now_ms) for queue, value in items}

    def clear(self) -> None:
        with map_redis_errors("clear load"):
            self.client.delete(self.key)
