"""The delivery ledger's contract: where each unit key stands with each downstream."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tidegate.load.ledger import DeliveryState, LedgerEntry

__all__ = ["LedgerStore"]


@runtime_checkable
class LedgerStore(Protocol):
    """What the unit lifecycle and the orphan sweep ask of a delivery ledger.

    Every entry lives ``ttl_s`` after its last write; ``sending`` never downgrades a
    ``delivered`` entry; times are ms since the epoch on the store's clock.
    """

    ttl_s: int

    def state(self, downstream: str, key: str) -> DeliveryState:
        """Where ``key`` stands with ``downstream``."""

    def entry(self, downstream: str, key: str) -> LedgerEntry:
        """``key``'s record, the store's clock and its doubt, read together."""

    def delivered(self, downstream: str, key: str) -> bool:
        """Whether ``downstream`` already accepted ``key``."""

    def sending(self, downstream: str, key: str) -> float | None:
        """Record that ``key`` is about to be sent; the send time, ``None`` if delivered."""

    def refused(self, downstream: str, key: str) -> None:
        """The last attempt never reached the downstream: keep ``sending``, time 0."""

    def mark(self, downstream: str, key: str) -> None:
        """Record that ``downstream`` accepted ``key``."""
