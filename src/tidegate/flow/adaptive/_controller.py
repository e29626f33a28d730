"""One adaptive controller per downstream for the whole fleet: elect, decide, record.

Every worker can run :class:`AdaptiveController` for a downstream and call
:meth:`~AdaptiveController.tick` once a period with what it saw. Only the lease holder
decides: it starts from the state the fleet learned last (or the policy's start),
runs the pure maths, writes the new state fenced by its lease, and logs one JSON event
per change with its reason. The others return at once; when the holder dies, the
next tick after its lease expires elects another, which picks up the stored state.

:meth:`~AdaptiveController.tick` takes the windows as arguments (the maths' test
seam). :meth:`~AdaptiveController.run_once` is the live loop's step: every worker
reports each call with :meth:`~AdaptiveController.report`; the elected controller
drains the fleet's window, decides, and applies the result to the downstream's
:class:`~tidegate.flow.Gate` — the live rate and lease count through
``Gate.configure``, an exhausted quota through ``Gate.pause``. While the mode is
``on`` the controller owns those two values: an operator who wants them by hand sets
the mode to ``frozen`` or ``off`` first.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from dataclasses import dataclass, replace
from typing import Any

from tidegate.errors import BackendError, BackendUnavailable, ConfigurationError
from tidegate.events import (
    ConcurrencyChanged,
    RateChanged,
    RateStaleRejection,
    emit,
)
from tidegate.flow.adaptive._concurrency import (
    ConcurrencyDecision,
    LatencyWindow,
    decide_concurrency,
    initial_concurrency_state,
)
from tidegate.flow.adaptive._gate import apply_tick, gate_saturated
from tidegate.flow.adaptive._hint import RateLimitHint
from tidegate.flow.adaptive._observe import CallOutcome, windows
from tidegate.flow.adaptive._overrides import OVERRIDABLE, apply_overrides
from tidegate.flow.adaptive._policy import AdaptivePolicy
from tidegate.flow.adaptive._rate import (
    RateDecision,
    RateWindow,
    decide_rate,
    initial_rate_state,
)
from tidegate.flow.adaptive._store import (
    DEFAULT_HISTORY_MAX,
    AdaptiveRecord,
    AdaptiveStore,
    check_history_max,
)
from tidegate.flow.gate import Gate
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.logging import get_logger

__all__ = ["DEFAULT_LEASE_TTL_S", "AdaptiveController", "ControllerTick"]

log = get_logger("tidegate.adaptive")

#: How long the controller's lease outlives its last tick, seconds: a few ticks, so
#: one slow tick does not hand the controller over, a dead holder is replaced quickly.
DEFAULT_LEASE_TTL_S = 10.0


#: The typed event of each decision the controller records in its history.
_ADAPTIVE_EVENTS: dict[str, type[RateChanged | RateStaleRejection | ConcurrencyChanged]] = {
    "adaptive_rate_changed": RateChanged,
    "adaptive_rate_stale_rejection": RateStaleRejection,
    "adaptive_concurrency_changed": ConcurrencyChanged,
}


def _stored(value: object) -> str:
    """An override as kept in the store: booleans as ``true``/``false``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class ControllerTick:
    """What the elected controller decided in one tick (``None``: not decided)."""

    rate: RateDecision | None = None
    concurrency: ConcurrencyDecision | None = None


class AdaptiveController:
    """The adaptive controller of one downstream, on one worker.

    Args:
        store: where the fleet's learned state lives (Redis, or memory).
        name: the downstream (``customs``, ``tos``…).
        policy: the configured box and mode; an operator's live overrides in the store
            (:meth:`configure`) take precedence, on every worker, from the next tick.
        prefix: tidegate's key prefix.
        holder: this worker's id in the election; unique by default.
        lease_ttl_s: how long the lease outlives a tick (> 0).
        history_max: decision events kept (>= 1).
    """

    def __init__(
        self,
        store: AdaptiveStore,
        name: str,
        policy: AdaptivePolicy,
        *,
        prefix: str = DEFAULT_PREFIX,
        holder: str | None = None,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
        history_max: int = DEFAULT_HISTORY_MAX,
    ) -> None:
        if not isinstance(policy, AdaptivePolicy):
            raise ConfigurationError(f"policy must be an AdaptivePolicy, got {policy!r}")
        if not (isinstance(lease_ttl_s, int | float) and 0 < lease_ttl_s < 86_400):
            raise ConfigurationError(f"lease_ttl_s must be within (0, 86400), got {lease_ttl_s!r}")
        self.store = store
        self.keys = Keyspace(prefix).adaptive(name)
        self.policy = policy
        self.holder = holder or _holder()
        self.lease_ttl_ms = lease_ttl_s * 1000.0
        self.history_max = check_history_max(history_max)
        self.leader = False
        self._record = AdaptiveRecord()
        self._drained_ms: float | None = None

    @property
    def name(self) -> str:
        return self.keys.name

    @property
    def record(self) -> AdaptiveRecord:
        """The state this controller works from (meaningful while it leads)."""
        return self._record

    def tick(
        self, rate: RateWindow | None = None, latency: LatencyWindow | None = None
    ) -> ControllerTick | None:
        """Decide once from the fleet's observations, if this worker is the controller.

        Returns:
            The decisions, or ``None`` when another worker leads, the mode is ``off``,
            or the lease was lost between the election and the write (nothing was
            written then).

        Raises:
            BackendUnavailable: the store is unreachable (nothing is decided).
        """
        policy = self._lead()
        if policy is None:
            return None
        return self._decide(policy, self.store.now_ms(), rate, latency)

    def run_once(self, gate: Gate | None = None) -> ControllerTick | None:
        """One step of the live loop: drain the fleet's reports, decide, apply to ``gate``.

        Only the elected worker drains (the others leave the window to it) and applies.

        Returns:
            The decisions, or ``None`` where :meth:`tick` would return ``None``.
        """
        policy = self._lead()
        if policy is None:
            return None
        now = self.store.now_ms()
        observed = self.store.drain(self.keys)
        elapsed = None if self._drained_ms is None else (now - self._drained_ms) / 1000.0
        self._drained_ms = now
        saturated = gate is not None and gate_saturated(gate)
        rate, latency = windows(observed, elapsed_s=elapsed, saturated=saturated)
        tick = self._decide(policy, now, rate, latency)
        if tick is not None and gate is not None:
            apply_tick(gate, tick)
        return tick

    def wait_rejection(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a 429 in the fleet's window (see
        :meth:`AdaptiveStore.wait_rejection`); True if one came. Only the controller's
        loop waits here: a 429 is decided on at once rather than at the next tick."""
        return self.store.wait_rejection(self.keys, timeout_s)

    def report(
        self,
        outcome: CallOutcome,
        *,
        latency_ms: float | None = None,
        in_flight: int = 0,
        held: bool = False,
        hint: RateLimitHint | None = None,
        admitted_ms: float | None = None,
    ) -> None:
        """Report one downstream call into the fleet's window (every worker, every call).

        Args:
            outcome: ``ok``, ``throttled`` (429) or ``unavailable`` (503, refused,
                timed out).
            latency_ms: how long the call took, for an answered call.
            in_flight: leases held while it ran (the gate's ``leases_held``).
            held: the gate made this call wait for admission.
            hint: the answer's rate-limit headers (``parse_rate_limit_headers``).
            admitted_ms: when the gate admitted the call (``Permit.admitted_ms``, fleet
                clock): a 429 to a call admitted before the last cut is an echo.
        """
        self.store.observe(
            self.keys,
            outcome,
            latency_ms=latency_ms,
            in_flight=in_flight,
            held=held,
            hint=hint,
            admitted_ms=admitted_ms,
        )

    def _lead(self) -> AdaptivePolicy | None:
        """The policy for this tick if this worker is the controller, else ``None``."""
        policy = self.effective_policy()
        if policy.mode == "off":
            self.stop()
            return None
        return policy if self._elect() else None

    def _decide(
        self,
        policy: AdaptivePolicy,
        now: float,
        rate: RateWindow | None,
        latency: LatencyWindow | None,
    ) -> ControllerTick | None:
        rate_decision = concurrency_decision = None
        record = self._record
        if policy.rate is not None and rate is not None:
            state = initial_rate_state(policy.rate, record.rate)
            rate_decision = decide_rate(state, rate, policy.rate, now_ms=now, mode=policy.mode)
            record = replace(record, rate=rate_decision.state)
        if policy.concurrency is not None and latency is not None:
            cstate = initial_concurrency_state(policy.concurrency, record.concurrency)
            concurrency_decision = decide_concurrency(
                cstate, latency, policy.concurrency, now_ms=now, mode=policy.mode
            )
            record = replace(record, concurrency=concurrency_decision.state)
        rejected = (0, 0) if rate is None else (rate.throttled, rate.unavailable)
        events = self._events(rate_decision, concurrency_decision, now, rejected=rejected)
        saved = self.store.save(
            self.keys,
            self.holder,
            record,
            [fields for _, fields in events],
            history_max=self.history_max,
        )
        if not saved:
            self._lost("lease_lost_before_write")
            return None
        self._record = record
        for event, fields in events:
            emit(_ADAPTIVE_EVENTS[event](downstream=self.name, **fields))
        return ControllerTick(rate_decision, concurrency_decision)

    def effective_policy(self) -> AdaptivePolicy:
        """The configured policy with the operator's live overrides applied.

        Overrides are validated when written; one that is unreadable anyway (edited by
        hand) is logged and ignored, and the configured policy is used.
        """
        overrides = self.store.read_overrides(self.keys)
        if not overrides:
            return self.policy
        try:
            return apply_overrides(self.policy, overrides)
        except ConfigurationError as exc:
            log.error("adaptive_overrides_invalid", downstream=self.name, error=str(exc)[:200])
            return self.policy

    def configure(self, **values: object) -> AdaptivePolicy:
        """Override the policy fleet-wide (``mode="frozen"``, ``max_rate=8``…).

        The values are merged with the overrides already in force and validated as a
        whole against the configured policy before anything is written.

        Raises:
            ConfigurationError: an unknown field or an invalid result; nothing written.
        """
        merged = {**self.store.read_overrides(self.keys), **values}
        policy = apply_overrides(self.policy, merged)
        stored = {name: _stored(value) for name, value in values.items()}
        self.store.write_overrides(self.keys, stored)
        log.warning("adaptive_policy_overridden", downstream=self.name, **stored)
        return policy

    def reset_overrides(self, *names: str) -> AdaptivePolicy:
        """Drop the named overrides (all when none is named); the configured values return."""
        unknown = sorted(set(names) - set(OVERRIDABLE))
        if unknown:
            raise ConfigurationError(f"cannot reset {unknown}; allowed: {sorted(OVERRIDABLE)}")
        cleared = list(names or OVERRIDABLE)
        self.store.write_overrides(self.keys, {}, clear=cleared)
        log.warning("adaptive_policy_reset", downstream=self.name, fields=sorted(cleared))
        return self.effective_policy()

    def stop(self) -> None:
        """Give the lease up, so another worker takes over at the next tick."""
        if self.leader:
            with contextlib.suppress(BackendError):  # unreachable: the lease expires anyway
                self.store.resign(self.keys, self.holder)
            self._lost("stopped")

    def history(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest decision events, newest first (any worker may read)."""
        return self.store.history(self.keys, limit)

    def _elect(self) -> bool:
        held = self.store.elect(self.keys, self.holder, self.lease_ttl_ms)
        if held and not self.leader:
            self._record = self._load()
            self.leader = True
            log.warning(
                "adaptive_controller_elected",
                downstream=self.name,
                holder=self.holder,
                learned_rate=None if self._record.rate is None else self._record.rate.rate,
                learned_concurrency=(
                    None
                    if self._record.concurrency is None
                    else self._record.concurrency.concurrency
                ),
            )
        elif not held and self.leader:
            self._lost("lease_taken")
        return held

    def _lost(self, reason: str) -> None:
        self.leader = False
        self._drained_ms = None
        log.warning(
            "adaptive_controller_lost", downstream=self.name, holder=self.holder, reason=reason
        )

    def _load(self) -> AdaptiveRecord:
        """The fleet's learned state; an unreadable one is logged and started afresh."""
        try:
            return self.store.load(self.keys)
        except BackendUnavailable:
            raise
        except BackendError as exc:
            log.error("adaptive_state_unreadable", downstream=self.name, error=str(exc)[:200])
            return AdaptiveRecord()

    def _events(
        self,
        rate: RateDecision | None,
        concurrency: ConcurrencyDecision | None,
        now: float,
        *,
        rejected: tuple[int, int] = (0, 0),
    ) -> list[tuple[str, dict[str, Any]]]:
        events = []
        if rate is not None and rate.changed:
            events.append(("adaptive_rate_changed", {"kind": "rate", "at_ms": now, **rate.event()}))
        elif rate is not None and rate.reason in ("throttled_stale", "unavailable_stale"):
            # Nothing moves, but an operator reading the history sees the 429s (503s) and
            # why they did not cut (the gateway counts 429s towards a suspension anyway).
            throttled, unavailable = rejected
            fields = {
                "kind": "rate",
                "at_ms": now,
                **rate.event(),
                "throttled": throttled,
                "unavailable": unavailable,
            }
            events.append(("adaptive_rate_stale_rejection", fields))
        if concurrency is not None and concurrency.changed:
            fields = {"kind": "concurrency", "at_ms": now, **concurrency.event()}
            events.append(("adaptive_concurrency_changed", fields))
        return events
