"""The contract between the flow controls and the store that holds their state.

A backend offers a handful of *atomic* primitives — one admission decision, lease
release and renewal, pause, live configuration — and nothing else. The controls in
``tidegate.flow`` (rate limiter, concurrency limiter, gate) are policy on top; they
never see Redis. Two backends implement this contract and pass one shared test suite:
``RedisBackend`` (Lua scripts, fleet-wide) and ``MemoryBackend`` (one process).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from tidegate.keys import DEFAULT_PREFIX, GateKeys

__all__ = [
    "DEFAULT_PREFIX",
    "RENEW_LOST",
    "RENEW_OK",
    "RENEW_RESTORED",
    "AcquireParams",
    "AcquireResult",
    "AsyncBackend",
    "Backend",
    "GateKeys",
    "GateSnapshot",
    "Status",
]

#: What a lease renewal found (``lease_renew.lua``'s reply): expired or gone …
RENEW_LOST = 0
#: … held, and extended …
RENEW_OK = 1
#: … gone although the holder's clock says it is valid (the store lost it), put back.
RENEW_RESTORED = 2


class Status(enum.IntEnum):
    """Outcome of one admission decision (the first field the Lua script returns)."""

    ADMITTED = 0
    RATE = 1
    PAUSED = 2
    CONCURRENCY = 3


class AcquireParams(NamedTuple):
    """The arguments of one admission decision (ARGV of ``gate_acquire.lua``).

    ``rate == 0`` disables the rate part and ``concurrency == 0`` the lease part, so
    the same primitive serves the rate limiter, the concurrency limiter and the gate.
    ``leases=False`` disables the lease part too, also against a cap configured live
    (the gate of a caller whose connections a relay's lanes hold the leases for), and
    ``tokens=False`` the rate part (the lanes' own leases: their calls' tokens were
    taken by the workers that sent them).
    """

    cost: int
    rate: float
    burst: int
    concurrency: int
    lease_ms: float
    max_wait_ms: float
    holder: str
    check_pause: bool
    read_config: bool
    now_ms: float | None = None
    leases: bool = True
    tokens: bool = True


class AcquireResult(NamedTuple):
    """What the backend decided.

    Attributes:
        status: admitted, or which part refused.
        wait_ms: admitted: sleep this long before going (the slot is reserved);
            refused: time until the refusing part would let the request through.
        remaining: rate tokens (or free leases, whichever is smaller) left; -1 when
            neither part is limited.
        reclaimed: expired leases of dead holders that this decision removed.
        leased: a lease was taken for the holder; the caller must release it.
        now_ms: the decision's time on the fleet clock (Redis TIME), in ms.
        lease_ms: the lease length the decision used, in ms: the live value of the
            config hash when one is set (and read), else the caller's default. A
            lease's holder renews by it, not by its own default. ``None`` from a
            decision that has no lease part (the rate-only script).
    """

    status: Status
    wait_ms: float
    remaining: int
    reclaimed: int
    leased: bool = False
    now_ms: float = 0.0
    lease_ms: float | None = None


@dataclass(frozen=True, slots=True)
class GateSnapshot:
    """A read-only view of a limit for operators (``tidegate gate show``)."""

    config: dict[str, float]
    paused_until_ms: float | None
    pause_reason: str | None
    leases_held: int
    tat_ms: float | None
    now_ms: float
    #: Tokens admitted so far through the gate's script (a monotonic counter; the
    #: rate-only path of a plain rate limiter does not count). Take deltas.
    admitted_total: int = 0


@runtime_checkable
class Backend(Protocol):
    """Atomic primitives the sync controls are built on."""

    def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult:
        """Decide one request atomically; consume only if admitted."""
        ...

    def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool:
        """Release ``holder``'s lease and wake one waiter; False if it had expired."""
        ...

    def renew(self, keys: GateKeys, holder: str, lease_ms: float, *, restore: bool = False) -> int:
        """Extend ``holder``'s lease to now + ``lease_ms``: :data:`RENEW_OK`, or
        :data:`RENEW_LOST` if it had expired or is gone. With ``restore`` (the holder's
        own clock says the lease is still valid), a lease that is gone is put back —
        the store lost it (a failover) — and :data:`RENEW_RESTORED` returned."""
        ...

    def wait_released(self, keys: GateKeys, timeout_s: float) -> None:
        """Block until a lease is released or ``timeout_s`` passes (no busy polling)."""
        ...

    def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]:
        """Pause the limit until now + ``pause_ms`` unless already paused longer."""
        ...

    def resume(self, keys: GateKeys) -> None:
        """End a pause now."""
        ...

    def write_config(self, keys: GateKeys, values: dict[str, float]) -> None:
        """Store live overrides (rate, burst, concurrency, lease_ms)."""
        ...

    def snapshot(self, keys: GateKeys) -> GateSnapshot:
        """Read the limit's state for display."""
        ...

    def sleep(self, seconds: float) -> None:
        """Sleep on the backend's clock (a fake clock in tests advances instead)."""
        ...

    def monotonic(self) -> float:
        """The local monotonic clock used for the caller's own wait budget."""
        ...


@runtime_checkable
class AsyncBackend(Protocol):
    """The asyncio twin of :class:`Backend`: same primitives, awaited."""

    async def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult: ...

    async def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool: ...

    async def renew(
        self, keys: GateKeys, holder: str, lease_ms: float, *, restore: bool = False
    ) -> int: ...

    async def wait_released(self, keys: GateKeys, timeout_s: float) -> None: ...

    async def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]: ...

    async def resume(self, keys: GateKeys) -> None: ...

    async def write_config(self, keys: GateKeys, values: dict[str, float]) -> None: ...

    async def snapshot(self, keys: GateKeys) -> GateSnapshot: ...

    async def sleep(self, seconds: float) -> None: ...

    def monotonic(self) -> float: ...
