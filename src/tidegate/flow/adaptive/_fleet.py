"""The adaptive controller inside a worker: report every call, tick in a thread.

Every worker process runs both halves for each adaptive downstream:

* :class:`AdaptiveReporter` is the downstream client's
  :class:`~tidegate.downstream.CallObserver`: each call's outcome, latency and
  rate-limit headers go into the fleet's window in Redis, one script call (one round
  trip) per call;
* :class:`AdaptiveLoop` is a daemon thread that calls
  :meth:`~tidegate.flow.adaptive.AdaptiveController.run_once` once a tick. Every
  worker's loop asks for the lease; the one holding it drains the window, decides and
  retunes the gate, the others return at once. When the holder dies its lease expires
  and the next worker's tick takes over from the state kept in Redis. Between ticks
  the holder waits on the window's 429 token rather than the clock: a 429 is decided
  on within a round trip, not up to a tick later, when the fleet's pause for it (a
  ``Retry-After`` of 1 s) may already be over and calls back out at the old rate —
  each further 429 counting towards a suspension. On the deterministic model
  (``bench/adaptive_model.py --ticks``: 17 schedules × 24 seeds × four tick spacings)
  the runs that got the fleet suspended went from 8 of 1,632 to 1.

A tick that cannot reach Redis is logged and retried at the next tick: the gate keeps
the last rate it was given, and the lease (if this worker held it) runs out.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from tidegate.errors import BackendError, ConfigurationError
from tidegate.flow._admitted import admitted_ms as held_since
from tidegate.flow._admitted import waited
from tidegate.flow.adaptive._controller import AdaptiveController
from tidegate.flow.adaptive._hint import RateLimitHint
from tidegate.flow.adaptive._observe import CallOutcome
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from tidegate.flow.gate import Gate

__all__ = ["DEFAULT_TICK_S", "AdaptiveLoop", "AdaptiveReporter"]

log = get_logger("tidegate.adaptive")

#: How often each worker's loop ticks, seconds: the controller's decision period.
DEFAULT_TICK_S = 1.0


class AdaptiveReporter:
    """Writes each downstream call into the fleet's window (a ``CallObserver``).

    Each report carries when the gate admitted the call and whether it had to wait:
    given, or read from the gate slot this context holds (``with gate.slot():
    client.send(...)`` — the client calls the observer inside the slot). The first
    tells a 429 of a call admitted before the last cut (an echo) from news; the second
    that the gate, not demand, set the pace (``held``: the window is saturated, and its
    measured rate, deflated by a pause, is not the rate a 429 met).

    Args:
        controller: the downstream's controller on this worker.
        gate: the downstream's gate, to count the leases in flight for a latency
            report (``None``: not counted; only the concurrency controller uses it).
    """

    def __init__(self, controller: AdaptiveController, gate: Gate | None = None) -> None:
        self.controller = controller
        self.gate = gate

    def observe(
        self,
        outcome: CallOutcome,
        *,
        latency_ms: float | None,
        hint: RateLimitHint | None,
        admitted_ms: float | None = None,
        held: bool | None = None,
    ) -> None:
        in_flight = 0
        if self.gate is not None and latency_ms is not None:
            policy = self.controller.policy
            if policy.concurrency is not None:
                in_flight = self.gate.state().leases_held
        name = self.gate.name if self.gate is not None else self.controller.name
        if admitted_ms is None:
            admitted_ms = held_since(name)
        if held is None:
            held = bool(waited(name))
        self.controller.report(
            outcome,
            latency_ms=latency_ms,
            in_flight=in_flight,
            held=held,
            hint=hint,
            admitted_ms=admitted_ms,
        )


class AdaptiveLoop:
    """One worker's controller tick, in a daemon thread.

    Args:
        controller: the downstream's controller on this worker.
        gate: the gate it retunes while it holds the lease.
        tick_s: seconds between ticks (> 0).
    """

    def __init__(
        self, controller: AdaptiveController, gate: Gate, *, tick_s: float = DEFAULT_TICK_S
    ) -> None:
        if not (isinstance(tick_s, int | float) and 0 < tick_s <= 60):
            raise ConfigurationError(f"tick_s must be within (0, 60], got {tick_s!r}")
        self.controller = controller
        self.gate = gate
        self.tick_s = float(tick_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start ticking (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"tidegate-adaptive-{self.controller.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop ticking and give the lease up, so another worker takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.controller.stop()

    def tick(self) -> None:
        """One tick; a store or gate that cannot be reached is logged, not raised."""
        try:
            self.controller.run_once(self.gate)
        except BackendError as exc:
            log.warning(
                "adaptive_tick_failed", downstream=self.controller.name, error=type(exc).__name__
            )

    def wait(self) -> None:
        """Until the next tick — or, while this worker is the controller, until a 429
        reaches the fleet's window, whichever comes first."""
        deadline = time.monotonic() + self.tick_s
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if not self.controller.leader:
                self._stop.wait(left)
                return
            try:
                if self.controller.wait_rejection(left):
                    return
            except BackendError as exc:
                log.warning(
                    "adaptive_wait_failed",
                    downstream=self.controller.name,
                    error=type(exc).__name__,
                )
                # Until the tick that was due, not ``left`` more: the failed wait may
                # have used it all (a socket timeout is 5 s).
                self._stop.wait(max(0.0, deadline - time.monotonic()))
                return

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self.wait()
