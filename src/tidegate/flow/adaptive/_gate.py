"""Where the controller meets the gate: is demand above the limits, and apply a tick.

The controller's decisions are values; this is the one place that turns them into the
downstream gate's live settings (``Gate.configure``) and pauses (``Gate.pause``), and
reads from the gate whether the fleet is held back by it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidegate.flow.gate import Gate

if TYPE_CHECKING:
    from tidegate.flow.adaptive._controller import ControllerTick

__all__ = ["PAUSE_REASON_QUOTA", "apply_tick", "gate_saturated"]

#: The ``reason`` of a gate pause for a quota the downstream says is used up.
PAUSE_REASON_QUOTA = "rate_limit_exhausted"


def gate_saturated(gate: Gate) -> bool:
    """Whether a call arriving at ``gate`` now would wait: tokens reserved ahead of now
    beyond the burst, or every lease held. Demand is above the live limits."""
    state = gate.state()
    snap = gate.backend.snapshot(gate.limit.keys)
    policy = state.policy
    interval_ms = 1000.0 / policy.rate
    horizon_ms = (snap.tat_ms or snap.now_ms) - snap.now_ms
    waiting = horizon_ms - (policy.burst - 1) * interval_ms > 0
    full = policy.concurrency > 0 and state.leases_held >= policy.concurrency
    return waiting or full


def apply_tick(gate: Gate, tick: ControllerTick) -> None:
    """Make the gate say what the controller decided (a no-op where it already does).

    Compared with the gate's live values rather than with the previous decision, so a
    gate retuned by hand, or an apply that failed last tick, converges on the next. A
    frozen controller touches nothing: what an operator sets by hand during a freeze
    stays.
    """
    rate = tick.rate if tick.rate is not None and tick.rate.reason != "frozen" else None
    leases = tick.concurrency
    if leases is not None and leases.reason == "frozen":
        leases = None
    live = gate.state().policy
    changes: dict[str, Any] = {}
    if rate is not None and rate.state.rate != live.rate:
        changes["rate"] = rate.state.rate
    if leases is not None and leases.state.concurrency != live.concurrency:
        changes["concurrency"] = leases.state.concurrency
    if changes:
        gate.configure(**changes)
    if rate is not None and rate.pause_s:
        gate.pause(rate.pause_s, PAUSE_REASON_QUOTA)
