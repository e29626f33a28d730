"""Outbound backpressure: the fleet-wide controls in front of each downstream.

``RateLimiter`` (GCRA), ``ConcurrencyLimiter`` (leases) and ``Gate`` (both, plus a
fleet-wide pause and live retuning) — each with an asyncio twin — over a backend that
is either Redis (fleet-wide) or memory (one process).
"""

from __future__ import annotations

from tidegate.flow._core import DEFAULT_MAX_WAIT_S, Decision
from tidegate.flow.concurrency import AsyncConcurrencyLimiter, ConcurrencyLimiter
from tidegate.flow.gate import AsyncGate, Gate, GateState
from tidegate.flow.permit import AsyncPermit, Permit
from tidegate.flow.rate import AsyncRateLimiter, RateLimiter

__all__ = [
    "DEFAULT_MAX_WAIT_S",
    "AsyncConcurrencyLimiter",
    "AsyncGate",
    "AsyncPermit",
    "AsyncRateLimiter",
    "ConcurrencyLimiter",
    "Decision",
    "Gate",
    "GateState",
    "Permit",
    "RateLimiter",
]
