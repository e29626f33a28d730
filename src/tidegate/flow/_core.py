"""What the sync and asyncio controls share: the admission flow, written once.

An admission is a small conversation with the backend — decide, maybe sleep until the
reserved slot, maybe wait out a pause or for a lease to free, decide again. It is
written here as a generator that *yields* the I/O it needs (:class:`Decide`,
:class:`Sleep`, :class:`WaitReleased`, :class:`Release`) and receives the answers;
``drive_sync`` and ``drive_async`` perform that I/O. So the maths, the budget and the
log events exist once, and the two twins differ only in ``await`` (the httpx ``auth_flow`` pattern).

A reserved slot is not a promise to go: the pause is read again after the sleep, because
another worker's 429 may have paused the fleet meanwhile. A paused caller forfeits its
slot (the bucket refills during the pause, so nothing is lost by it) and decides again
after the pause; keeping the slot would release every reserved caller at the pause's
end at once, a burst larger than the bucket, into a downstream that just said 429.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from tidegate.errors import ConfigurationError, Throttled
from tidegate.events import GatePausedAfterReserve, GatePauseWaited, GateThrottled, emit
from tidegate.flow.backends.base import (
    AcquireParams,
    AcquireResult,
    GateKeys,
    Status,
)
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from tidegate.flow.backends.base import AsyncBackend, Backend
    from tidegate.flow.permit import AsyncPermit, Permit

__all__ = [
    "Admission",
    "Decide",
    "Decision",
    "Limit",
    "Release",
    "Sleep",
    "WaitReleased",
    "drive_async",
    "drive_sync",
    "new_holder_id",
]

log = get_logger("tidegate.flow")

_HOST = socket.gethostname()
_COUNTER = itertools.count(1)
#: Default for ``max_wait``: long enough to ride out a short pause or a burst queue,
#: short enough that a worker does not sit on a message for minutes (park instead).
DEFAULT_MAX_WAIT_S = 30.0


def new_holder_id() -> str:
    """A lease holder id unique across hosts, processes (also forked) and calls."""
    return f"{_HOST}:{os.getpid()}:{next(_COUNTER)}"


class Decide(NamedTuple):
    """Ask the backend for one decision."""

    params: AcquireParams


class Sleep(NamedTuple):
    """Sleep until a reserved slot, or until a pause ends."""

    seconds: float


class WaitReleased(NamedTuple):
    """Block until a concurrency lease is released, at most ``timeout_s``."""

    timeout_s: float


class Release(NamedTuple):
    """Give back a lease taken with a slot the caller will not use."""

    holder: str
    wake_cap: int


Step: TypeAlias = Decide | Sleep | WaitReleased | Release


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer of ``try_acquire``: admitted now or not, and when it would be.

    Attributes:
        allowed: admitted now (nothing was consumed otherwise).
        wait_s: when refused, seconds until this request would be admitted (a lower
            bound for ``reason == "concurrency"``); 0 when allowed.
        remaining: tokens (or free slots) left after this decision; -1 = unlimited.
        reason: ``"admitted"``, ``"rate"``, ``"paused"``, ``"concurrency"`` or
            ``"fail_open"`` (admitted without the backend: Redis was unreachable).
        permit: when a concurrency slot was taken, the permit to release after the call.
    """

    allowed: bool
    wait_s: float
    remaining: int
    reason: str
    permit: Permit | AsyncPermit | None = None


class Admission(NamedTuple):
    """The end of a successful ``acquire``: how long it waited, and the lease taken.

    ``admitted_ms`` is when the admitting decision was made (fleet clock): the slot was
    spaced at the rate in force then, however long the caller slept until it.
    ``lease_ms`` is the lease length that decision used (the live value, when one is
    configured): the permit renews by it.
    """

    waited_s: float
    remaining: int
    holder: str
    leased: bool
    admitted_ms: float | None = None
    lease_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Limit:
    """The static description of one limit: its name, keys and default parameters.

    Validation happens here, once, for every control.

    ``leases=False`` admits on the pause and the rate only: the concurrency cap (also
    one configured live) is ignored, no lease is taken and nothing is left to release
    or renew; the admission is still counted. For callers whose downstream connections
    are held by someone else's leases (a relay's lanes). ``tokens=False`` is the other
    half: a lease (and the pause) without a rate token, for those lanes themselves —
    their workers already took the token of every call they send.
    """

    name: str
    keys: GateKeys
    rate: float
    burst: int
    concurrency: int
    lease_s: float
    check_pause: bool
    read_config: bool
    leases: bool = True
    tokens: bool = True

    @classmethod
    def build(
        cls,
        name: str,
        *,
        kind: str,
        prefix: str = DEFAULT_PREFIX,
        rate: float = 0.0,
        burst: int = 1,
        concurrency: int = 0,
        lease_s: float = 30.0,
        check_pause: bool = False,
        read_config: bool = False,
        leases: bool = True,
        tokens: bool = True,
    ) -> Limit:
        if not name or any(c in name for c in "{}\n\r "):
            raise ConfigurationError(f"limit name must be non-empty without braces/space: {name!r}")
        return cls(
            name,
            Keyspace(prefix).limit(name, kind=kind),
            rate,
            burst,
            concurrency,
            lease_s,
            check_pause,
            read_config,
            leases,
            tokens,
        )

    def params(self, cost: int, max_wait_s: float, holder: str) -> AcquireParams:
        return AcquireParams(
            cost=cost,
            rate=self.rate,
            burst=self.burst,
            concurrency=self.concurrency,
            lease_ms=self.lease_s * 1000.0,
            max_wait_ms=max_wait_s * 1000.0,
            holder=holder,
            check_pause=self.check_pause,
            read_config=self.read_config,
            leases=self.leases,
            tokens=self.tokens,
        )

    def pause_check(self) -> AcquireParams:
        """A decision that consumes nothing and only reads the pause: no rate, no cap,
        no live config, so the script answers PAUSED or ADMITTED with wait 0."""
        return AcquireParams(
            cost=1,
            rate=0.0,
            burst=1,
            concurrency=0,
            lease_ms=0.0,
            max_wait_ms=0.0,
            holder="",
            check_pause=True,
            read_config=False,
        )

    def check_cost(self, cost: int) -> None:
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise ConfigurationError(f"n must be an integer >= 1, got {cost!r}")
        if self.rate > 0 and cost > self.burst:
            raise ConfigurationError(
                f"n={cost} exceeds burst={self.burst}: it could never be admitted"
            )

    def refusal(self, result: AcquireResult) -> Decision:
        """Turn a refused try-only answer into a :class:`Decision`, and emit it.

        Every refusal is a throttle decision and one :class:`~tidegate.events.GateThrottled`
        (the fleet-wide throttle counters subscribe to these events); only refusals are
        emitted, so admitted calls — the hot path — pay nothing for it.
        """
        wait_s = result.wait_ms / 1000.0
        reason = result.status.name.lower()
        emit(GateThrottled(self.name, reason, round(wait_s, 4), result.remaining, "try"))
        return Decision(False, wait_s, result.remaining, reason)

    def admission(
        self, cost: int, max_wait_s: float, holder: str, started_s: float
    ) -> Generator[Step, AcquireResult | float | None, Admission]:
        """The acquire conversation: decide, then sleep/wait/retry until admitted.

        ``started_s`` and every ``float`` sent back after a Sleep/WaitReleased are the
        caller's local monotonic clock: the wait *budget* is the caller's own business,
        while every admission *decision* uses the fleet clock inside the backend.
        """
        if not math.isfinite(max_wait_s) or max_wait_s < 0:
            raise ConfigurationError(f"max_wait must be a finite number >= 0, got {max_wait_s!r}")
        now_s = started_s
        while True:
            budget_s = max(0.0, max_wait_s - (now_s - started_s))
            sent = yield Decide(self.params(cost, budget_s, holder))
            assert isinstance(sent, AcquireResult)
            result = sent
            if result.reclaimed:
                log.warning("gate_lease_reclaimed", downstream=self.name, leases=result.reclaimed)
            wait_s = result.wait_ms / 1000.0
            if result.status is Status.ADMITTED:
                if wait_s > 0:
                    emit(
                        GateThrottled(
                            self.name, "rate", round(wait_s, 4), result.remaining, "reserve"
                        )
                    )
                    slept = yield Sleep(wait_s)
                    if self.check_pause:
                        check = yield Decide(self.pause_check())
                        assert isinstance(check, AcquireResult)
                        if check.status is Status.PAUSED:
                            # A pause written while this caller slept (another worker's
                            # 429): the reserved slot is dropped, the lease given back,
                            # and the loop decides again, so the pause is waited out or
                            # parked on like any other and a fresh slot is reserved.
                            emit(
                                GatePausedAfterReserve(
                                    self.name,
                                    wait_s=round(check.wait_ms / 1000.0, 4),
                                    slot_forfeited_s=round(wait_s, 4),
                                )
                            )
                            if result.leased:
                                yield Release(holder, max(1, self.concurrency))
                            assert isinstance(slept, float)
                            now_s = slept
                            continue
                waited = now_s - started_s + wait_s
                return Admission(
                    waited,
                    result.remaining,
                    holder,
                    result.leased,
                    result.now_ms,
                    result.lease_ms,
                )
            if result.status is Status.RATE or (
                result.status is Status.PAUSED and wait_s > budget_s
            ):
                reason = result.status.name.lower()
                emit(
                    GateThrottled(self.name, reason, round(wait_s, 4), result.remaining, "refused")
                )
                raise Throttled(self.name, wait_s, reason=reason)
            if result.status is Status.PAUSED:
                emit(GatePauseWaited(self.name, round(wait_s, 4)))
                sent = yield Sleep(wait_s)
            else:  # CONCURRENCY: wait for a release, at most until the oldest lease expires
                if budget_s <= 0:
                    emit(GateThrottled(self.name, "concurrency", round(wait_s, 4), 0, "refused"))
                    raise Throttled(self.name, wait_s, reason="concurrency")
                sent = yield WaitReleased(max(0.001, min(wait_s, budget_s)))
            assert isinstance(sent, float)
            now_s = sent


def drive_sync(
    flow: Generator[Step, AcquireResult | float | None, Admission],
    backend: Backend,
    keys: GateKeys,
) -> Admission:
    """Perform the flow's I/O with a sync backend."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, Decide):
                step = flow.send(backend.acquire(keys, step.params))
            elif isinstance(step, Sleep):
                backend.sleep(step.seconds)
                step = flow.send(backend.monotonic())
            elif isinstance(step, Release):
                backend.release(keys, step.holder, wake_cap=step.wake_cap)
                step = flow.send(None)
            else:
                backend.wait_released(keys, step.timeout_s)
                step = flow.send(backend.monotonic())
    except StopIteration as done:
        admitted: Admission = done.value
        return admitted


async def drive_async(
    flow: Generator[Step, AcquireResult | float | None, Admission],
    backend: AsyncBackend,
    keys: GateKeys,
) -> Admission:
    """Perform the flow's I/O with an asyncio backend."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, Decide):
                step = flow.send(await backend.acquire(keys, step.params))
            elif isinstance(step, Sleep):
                await backend.sleep(step.seconds)
                step = flow.send(backend.monotonic())
            elif isinstance(step, Release):
                await backend.release(keys, step.holder, wake_cap=step.wake_cap)
                step = flow.send(None)
            else:
                await backend.wait_released(keys, step.timeout_s)
                step = flow.send(backend.monotonic())
    except StopIteration as done:
        admitted: Admission = done.value
        return admitted
