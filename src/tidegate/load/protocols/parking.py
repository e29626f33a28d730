"""The parking lot's contract: durable waiting by due time, claimed under a lease."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from tidegate.load.parking import ParkedMessage

__all__ = ["ParkingStore"]


@runtime_checkable
class ParkingStore(Protocol):
    """Where messages that must wait long wait: never in worker memory.

    Callers: the Celery engine parks (``integrations/celery/gated.py``), the mover
    claims, republishes and acks (``integrations/celery/mover.py``), the orphan sweep
    and the reports read keys and depth.
    """

    def park(self, envelope: Mapping[str, Any], *, delay_s: float, reason: str) -> str:
        """Keep ``envelope`` until ``delay_s`` from now; return its new id."""
        ...

    def claim_due(self, limit: int = 100) -> list[ParkedMessage]:
        """Take up to ``limit`` due messages, earliest due first, under a lease: a
        claim not acked within the lease is due again; no two claimers share one."""
        ...

    def ack(self, message_id: str) -> None:
        """Forget a message once it is republished."""
        ...

    def iter_keys(self, page: int) -> Iterator[list[str]]:
        """The idempotency keys of the parked messages, about ``page`` at a time."""
        ...

    def depth(self) -> int:
        """Messages parked or claimed (not yet acked)."""
        ...

    def next_due_in_s(self) -> float | None:
        """Seconds until the earliest waiting message is due (0 if one is), or None."""
        ...
