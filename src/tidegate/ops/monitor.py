"""The monitor loop: sample every queue, judge it, tell the autoscaler, give back the shed.

Each interval the monitor

1. reads every queue's depth from the broker (:mod:`tidegate.load.depth`: priority
   sub-queues and reserved-but-unacked messages included) and each queue's
   downstream gate (paused? every lease held? workers already queued for tokens?);
2. advances each queue's :class:`~tidegate.load.watermarks.LoadState` with the pure
   :func:`~tidegate.load.watermarks.advance` — level, intervals over the HWM,
   shedding latch, ``scale_out``/``hold``/``scale_in`` with a reason, and
   ``desired_workers = min(backlog-based, quota-based)``, where quota-based counts
   the workers the downstream's connections or rate can keep busy, with the reason
   (:mod:`tidegate.load.sizing`: a worker waiting on a lease holds no connection);
3. publishes the result on the :class:`~tidegate.load.watermarks.LoadBoard`, where
   producers read the shedding latch and ``/metrics`` reads everything;
4. logs one ``queue_depth_sampled`` event per queue, plus ``scaling_signal_changed``
   and ``shedding_started`` / ``shedding_stopped`` when those change;
5. replays quarantined documents of queues that drained to their LWM, through the
   normal intake, at most ``replay_rate`` per second and refilling the queue only to
   the middle of its band (:func:`replay_budget`).

A Redis that refuses writes (memory full under ``noeviction``, a read-only replica
after a failover) stops every tick at its first write; the monitor says so once per
tick (``redis_unavailable_for_writes`` with the cause) and ``redis_writable_again``
when a tick succeeds again.

Only one monitor per prefix works at a time (a lease in Redis, renewed every tick);
others stand by and take over within a few intervals if it dies, so "N consecutive
samples" means the same thing fleet-wide.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from tidegate._redis import lua_script, map_redis_errors
from tidegate.errors import BackendError, BackendUnwritable, ConfigurationError
from tidegate.events import ScaleSignal, SheddingChanged, emit
from tidegate.flow import Gate
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load.admission import Admission
from tidegate.load.depth import DepthProbe
from tidegate.load.quarantine import Quarantine
from tidegate.load.watermarks import (
    BoardEntry,
    GateView,
    Level,
    LoadBoard,
    LoadState,
    ScalingPolicy,
    Watermarks,
    WatermarkStore,
    advance,
)
from tidegate.logging import get_logger
from tidegate.settings import Settings

__all__ = [
    "DEFAULT_MONITOR_INTERVAL_S",
    "DEFAULT_REPLAY_RATE",
    "Monitor",
    "QueueSpec",
    "gate_view",
    "replay_budget",
]

log = get_logger("tidegate.monitor")

#: Sampling period (``TIDEGATE_MONITOR_INTERVAL_S``), seconds.
DEFAULT_MONITOR_INTERVAL_S = 5.0
#: Quarantined documents replayed per second and queue (``TIDEGATE_REPLAY_RATE``).
DEFAULT_REPLAY_RATE = 50.0


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One monitored queue.

    Args:
        queue: the broker queue.
        gate: the downstream gate its tasks go through (``customs``), if any.
        policy: how its backlog and its downstream's quota become a worker count.
    """

    queue: str
    gate: str | None = None
    policy: ScalingPolicy = field(default_factory=ScalingPolicy)


def gate_view(gate: Gate, *, relay_depth: int = 1) -> GateView:
    """Read a gate's live policy, pause, leases and reservation horizon;
    ``relay_depth``: the downstream's ``TIDEGATE_<NAME>_RELAY_DEPTH`` (1 when unset)."""
    state = gate.state()
    snap = gate.backend.snapshot(gate.limit.keys)
    policy = state.policy
    interval_ms = 1000.0 / policy.rate
    horizon_ms = (snap.tat_ms or snap.now_ms) - snap.now_ms
    wait_ms = max(0.0, horizon_ms - (policy.burst - 1) * interval_ms)
    return GateView(
        name=gate.name,
        rate=policy.rate,
        burst=policy.burst,
        concurrency=policy.concurrency,
        paused_for_s=round(state.paused_for_s, 3),
        leases_held=state.leases_held,
        tokens_available=state.tokens_available,
        wait_s=round(wait_ms / 1000.0, 4),
        relay_depth=relay_depth,
    )


def replay_budget(credit: float, *, depth: int, marks: Watermarks) -> int:
    """Documents one replay round may queue: the rate credit, up to the band's middle.

    Pure. ``credit`` is ``replay_rate × elapsed`` carried between rounds. Refilling
    only to the middle of the band leaves half of it for fresh arrivals, so a replay
    never pushes its own queue back over the HWM.

    Example:
        >>> replay_budget(25.0, depth=50, marks=Watermarks(hwm=100, lwm=10))
        5
    """
    ceiling = marks.lwm + (marks.hwm - marks.lwm) // 2
    return max(0, min(math.floor(credit), ceiling - depth))


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Monitor:
    """Samples queues, publishes their load, emits signals, replays the quarantine.

    Args:
        client: tidegate's Redis (board, watermarks, gates, quarantine, lease).
        probe: the broker's depth probe.
        queues: the queues, as :class:`QueueSpec` or a ``{queue: gate name or None}``.
        prefix: tidegate's key prefix.
        interval_s: sampling period.
        admission: the intake replays go through; ``None`` disables replay.
        replay_rate: documents replayed per second and queue, at most.
        watermarks: the live watermarks (by default ``settings.watermarks`` + the Redis
            overrides).
        settings: the process's settings, built once by its CLI or runtime; the
            built-in values when omitted (never the environment read a second time).
        clock: monotonic seconds (for the replay credit).
    """

    def __init__(
        self,
        client: redis.Redis,
        probe: DepthProbe,
        queues: Sequence[QueueSpec] | Mapping[str, str | None],
        *,
        prefix: str = DEFAULT_PREFIX,
        interval_s: float = DEFAULT_MONITOR_INTERVAL_S,
        admission: Admission | None = None,
        replay_rate: float = DEFAULT_REPLAY_RATE,
        watermarks: WatermarkStore | None = None,
        clock: Callable[[], float] = time.monotonic,
        settings: Settings | None = None,
    ) -> None:
        specs = (
            [QueueSpec(q, g) for q, g in queues.items()]
            if isinstance(queues, Mapping)
            else list(queues)
        )
        if not specs:
            raise ConfigurationError("the monitor needs at least one queue")
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise ConfigurationError(f"interval_s must be a finite number > 0, got {interval_s!r}")
        if not (math.isfinite(replay_rate) and replay_rate > 0):
            raise ConfigurationError(f"replay_rate must be a finite number > 0: {replay_rate!r}")
        self.client = client
        self.probe = probe
        self.specs = {spec.queue: spec for spec in specs}
        self.prefix = prefix
        self.interval_s = interval_s
        self.admission = admission
        self.replay_rate = replay_rate
        settings = settings if settings is not None else Settings.load({})
        marks = settings.watermarks
        self.watermarks = watermarks or WatermarkStore(client, prefix=prefix, defaults=marks)
        self.board = LoadBoard(client, prefix=prefix)
        self.quarantine = Quarantine(client, prefix=prefix)
        self.holder = _holder()
        self.states: dict[str, LoadState] = {q: LoadState(q) for q in self.specs}
        self.leader = False
        self._gates = {s.gate: Gate(client, s.gate, prefix=prefix) for s in specs if s.gate}
        self._relay_depths = {
            name: settings.downstream(name).relay_depth or 1 for name in self._gates
        }
        self._lease_key = Keyspace(prefix).monitor_lease()
        self._lease = client.register_script(lua_script("monitor_lease", "tidegate.load"))
        self._clock = clock
        self._credit: dict[str, float] = {}
        self._last_tick: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Why Redis refused the last tick's writes (``"oom"``, ``"readonly"``…), or
        #: ``None`` while it takes them: the monitor cannot lead, publish or replay then.
        self.unwritable: str | None = None

    # -- one tick ------------------------------------------------------------------------

    def _take_lease(self) -> bool:
        ttl_ms = int(max(3 * self.interval_s, 1.0) * 1000)
        with map_redis_errors("monitor lease"):
            held = bool(self._lease([self._lease_key], [self.holder, ttl_ms]))
        if held != self.leader:
            log.warning("monitor_lease_changed", holder=self.holder, leader=held)
            if held:  # a new leader starts from the board, not from a stale memory
                board = self.board.read(list(self.specs))
                for queue, entry in board.items():
                    self.states[queue] = entry.state
        self.leader = held
        return held

    def tick(self) -> list[BoardEntry]:
        """Sample once; returns the published entries (empty when standing by)."""
        now = self._clock()
        elapsed = self.interval_s if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        if not self._take_lease():
            return []
        queues = list(self.specs)
        depths = self.probe.sample(queues)
        marks = self.watermarks.get_many(queues)
        now_ms = self.board.now_ms()
        quarantined = self.quarantine.depth_by_queue()
        entries = []
        for queue in queues:
            spec = self.specs[queue]
            gate = (
                gate_view(self._gates[spec.gate], relay_depth=self._relay_depths[spec.gate])
                if spec.gate
                else None
            )
            previous = self.states[queue]
            state = advance(
                previous, depths[queue].total, marks[queue], gate=gate, policy=spec.policy
            )
            self.states[queue] = state
            entry = BoardEntry(state, depths[queue], marks[queue], gate, now_ms, self.interval_s)
            entries.append(entry)
            self._log(entry, previous, quarantined.get(queue, 0))
        self.board.publish(entries)
        if self.admission is not None:
            for entry in entries:
                self._replay(entry, quarantined.get(entry.state.queue, 0), elapsed)
        return entries

    def _log(self, entry: BoardEntry, previous: LoadState, quarantined: int) -> None:
        state, depth, marks = entry.state, entry.depth, entry.marks
        log.info(
            "queue_depth_sampled",
            queue=state.queue,
            depth=state.depth,
            ready=depth.ready,
            unacked=depth.unacked,
            consumers=depth.consumers,
            hwm=marks.hwm,
            lwm=marks.lwm,
            level=state.level.value,
            over_hwm_intervals=state.over_hwm_intervals,
            shedding=state.shedding,
            signal=state.signal.value,
            reason=state.reason,
            desired_workers=state.desired_workers,
            backlog_workers=state.backlog_workers,
            quota_workers=state.quota_workers,
            quota_reason=state.quota_reason,
            gate=entry.gate.name if entry.gate else None,
            gate_wait_s=entry.gate.wait_s if entry.gate else None,
            quarantined=quarantined,
        )
        if (state.signal, state.reason) != (previous.signal, previous.reason):
            emit(
                ScaleSignal(
                    state.queue,
                    state.signal.value,
                    previous.signal.value,
                    state.reason,
                    state.depth,
                    state.desired_workers,
                )
            )
        if state.shedding != previous.shedding:
            emit(
                SheddingChanged(
                    state.queue,
                    state.depth,
                    state.over_hwm_intervals,
                    marks.hwm,
                    marks.lwm,
                    started=state.shedding,
                )
            )

    def _replay(self, entry: BoardEntry, quarantined: int, elapsed: float) -> None:
        assert self.admission is not None
        queue, state = entry.state.queue, entry.state
        if state.level is not Level.LOW or state.shedding or quarantined == 0:
            self._credit[queue] = 0.0
            return
        # At most one interval's worth per round, however long the last round took.
        cap = self.replay_rate * self.interval_s
        credit = min(cap, self._credit.get(queue, 0.0) + self.replay_rate * elapsed)
        budget = replay_budget(credit, depth=state.depth, marks=entry.marks)
        if budget > 0:
            report = self.admission.replay(queue, budget)
            credit -= report.replayed
        self._credit[queue] = credit

    # -- the loop ------------------------------------------------------------------------

    def run(self, *, iterations: int | None = None) -> None:
        """Tick every ``interval_s`` until :meth:`stop` (or ``iterations`` ticks)."""
        done = 0
        while not self._stop.is_set():
            started = self._clock()
            try:
                self.tick()
            except BackendUnwritable as exc:
                self.unwritable = exc.cause
                log.error(
                    "redis_unavailable_for_writes",
                    cause=exc.cause,
                    operation=exc.operation,
                    holder=self.holder,
                )
            except BackendError as exc:
                log.error("monitor_backend_error", error=type(exc).__name__)
            else:
                if self.unwritable is not None:
                    log.warning("redis_writable_again", cause=self.unwritable, holder=self.holder)
                self.unwritable = None
            done += 1
            if iterations is not None and done >= iterations:
                return
            self._stop.wait(max(0.0, self.interval_s - (self._clock() - started)))

    def start(self) -> Monitor:
        """Run in a daemon thread until :meth:`stop`."""
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="tidegate-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop and give up the lease, so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.interval_s))
            self._thread = None
        if self.leader:
            try:
                with map_redis_errors("monitor lease release"):
                    self._lease([self._lease_key], [self.holder, 0])
            except BackendError:
                pass
            self.leader = False

    def snapshot(self) -> dict[str, Any]:
        """The latest state of every queue, as plain data (for a CLI or a test)."""
        return {queue: state.as_dict() for queue, state in self.states.items()}
