"""The quarantine's contract: shed documents kept in full until they are replayed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from tidegate.load.quarantine import CLAIM_LEASE_MS, QuarantineClaim, QuarantinedDocument

__all__ = ["QuarantineStore"]


@runtime_checkable
class QuarantineStore(Protocol):
    """Shed documents, one FIFO line per queue, replayed claim → queue → ack.

    Callers: admission adds and replays (``load/admission.py``), the monitor and the
    metrics read depth and stats, the CLI and the console list, purge and replay.
    """

    def add(self, document: QuarantinedDocument) -> tuple[QuarantinedDocument, bool]:
        """Keep ``document``; the stored record and whether it is new (one record per
        idempotency key: a second add keeps the first and counts a duplicate)."""
        ...

    def claim(
        self, queue: str, limit: int, *, lease_ms: int = CLAIM_LEASE_MS
    ) -> list[QuarantinedDocument]:
        """:meth:`claim_batch`'s documents."""
        ...

    def claim_batch(
        self, queue: str, limit: int, *, lease_ms: int = CLAIM_LEASE_MS
    ) -> QuarantineClaim:
        """Take up to ``limit`` of ``queue``'s oldest documents under a lease, and say
        how many another claimer holds; an expired claim goes back at its old place."""
        ...

    def ack(self, document: QuarantinedDocument) -> bool:
        """Forget a replayed document and count it; False if it was already gone."""
        ...

    def release(self, document: QuarantinedDocument) -> None:
        """Put a claimed document back in line at its original place."""
        ...

    def queues(self) -> list[str]:
        """Queues that have (or had, until a purge) quarantined documents, sorted."""
        ...

    def __len__(self) -> int: ...

    def depth_by_queue(self) -> dict[str, int]:
        """Documents not yet replayed (waiting + claimed), per queue."""
        ...

    def depth(self, queue: str) -> int:
        """Documents of ``queue`` not yet replayed (waiting + claimed)."""
        ...

    def iter(
        self, *, queue: str | None = None, limit: int | None = None
    ) -> Iterator[QuarantinedDocument]:
        """Waiting documents (not claimed ones), oldest first per queue."""
        ...

    def purge(self, *, queue: str | None = None) -> int:
        """Delete the documents of ``queue`` (or all); how many there were."""
        ...

    def stats(self) -> Mapping[str, Any]:
        """Counters: documents, by_queue, shed_total, replayed_total, duplicates,
        purged, oldest_age_s."""
        ...

    def now(self) -> float:
        """The store's clock, Unix seconds (ages in listings)."""
        ...
