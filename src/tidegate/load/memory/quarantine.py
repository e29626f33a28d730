"""The quarantine in one process: :class:`~tidegate.load.Quarantine`'s twin.

Same records (JSON), same FIFO line per queue by quarantine time, same claim leases
(:func:`~tidegate.load.memory._lease.lease_claim`, the twin of ``lease_claim.lua``)
and the same counters, behind one lock; ``tests/load/stores/test_quarantine_behaviour.py``
runs on both. Not durable: shed documents must survive a restart in production,
which is why intake and the monitor use Redis.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict
from typing import Any

from tidegate.events import DocumentShed, emit
from tidegate.load._listing import listed
from tidegate.load.memory._clock import wall_ms
from tidegate.load.memory._lease import lease_claim, stamp
from tidegate.load.quarantine import CLAIM_LEASE_MS, QuarantineClaim, QuarantinedDocument
from tidegate.logging import get_logger, key_hash

__all__ = ["MemoryQuarantine"]

log = get_logger("tidegate.load")


class MemoryQuarantine:
    """Shed documents in dicts, under a lock.

    Args:
        clock: ms since the epoch; ``None`` = this host's wall clock (tests pass a
            :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self._now: Callable[[], float] = clock if clock is not None else wall_ms
        self._lock = threading.Lock()
        self._records: dict[str, str] = {}
        self._since: dict[str, float] = {}
        self._waiting: dict[str, dict[str, float]] = {}
        self._inflight: dict[str, dict[str, float]] = {}
        self._queues: set[str] = set()
        self._stats: Counter[str] = Counter()

    def _line(self, queue: str) -> tuple[dict[str, float], dict[str, float]]:
        return self._waiting.setdefault(queue, {}), self._inflight.setdefault(queue, {})

    # -- shedding ------------------------------------------------------------------------

    def add(self, document: QuarantinedDocument) -> tuple[QuarantinedDocument, bool]:
        """Store ``document``; the stored record and whether it is new."""
        record = document._record()
        with self._lock:
            now = stamp(self._now())
            added = document.key not in self._records
            if added:
                self._records[document.key] = record
                self._since[document.key] = now
                self._line(document.queue)[0][document.key] = now
                self._queues.add(document.queue)
                self._stats[f"shed:{document.document_class}"] += 1
            else:
                self._stats["duplicate"] += 1
            since = self._since.get(document.key, now)
        stored = QuarantinedDocument(**{**asdict(document), "quarantined_at": since / 1000.0})
        emit(
            DocumentShed(
                key_hash(document.key),
                document.document_class,
                document.queue,
                document.reason,
                document.depth,
                duplicate=not added,
            )
        )
        return stored, added

    # -- replay --------------------------------------------------------------------------

    def claim(
        self, queue: str, limit: int, *, lease_ms: int = CLAIM_LEASE_MS
    ) -> list[QuarantinedDocument]:
        """Claim up to ``limit`` of ``queue``'s oldest documents for replay."""
        return self.claim_batch(queue, limit, lease_ms=lease_ms).documents

    def claim_batch(
        self, queue: str, limit: int, *, lease_ms: int = CLAIM_LEASE_MS
    ) -> QuarantineClaim:
        """:meth:`claim`, also saying how many documents another replayer holds."""
        with self._lock:
            waiting, inflight = self._line(queue)
            if limit < 1:
                return QuarantineClaim([], len(inflight))
            held, claimed = lease_claim(
                waiting,
                inflight,
                self._records,
                self._since,
                now_ms=self._now(),
                limit=limit,
                lease_ms=lease_ms,
                pick="oldest",
            )
        documents = [QuarantinedDocument._load(body, since) for _, body, since in claimed]
        return QuarantineClaim(documents, held)

    def ack(self, document: QuarantinedDocument) -> bool:
        """Forget a document that was queued again; counts it as replayed."""
        with self._lock:
            waiting, inflight = self._line(document.queue)
            inflight.pop(document.key, None)
            waiting.pop(document.key, None)
            self._since.pop(document.key, None)
            removed = self._records.pop(document.key, None) is not None
            if removed:
                self._stats[f"replayed:{document.document_class}"] += 1
        return removed

    def release(self, document: QuarantinedDocument) -> None:
        """Put a claimed document back in line at its original place."""
        with self._lock:
            waiting, inflight = self._line(document.queue)
            inflight.pop(document.key, None)
            waiting[document.key] = document.quarantined_at * 1000

    # -- inspection ----------------------------------------------------------------------

    def queues(self) -> list[str]:
        """Queues that have (or had) quarantined documents."""
        with self._lock:
            return sorted(self._queues)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def _depth(self, queue: str) -> int:
        return len(self._waiting.get(queue, {})) + len(self._inflight.get(queue, {}))

    def depth_by_queue(self) -> dict[str, int]:
        """Documents not yet replayed, per queue (waiting + claimed)."""
        with self._lock:
            return {queue: self._depth(queue) for queue in sorted(self._queues)}

    def depth(self, queue: str) -> int:
        """Documents of ``queue`` not yet replayed (waiting + claimed)."""
        with self._lock:
            return self._depth(queue)

    def iter(
        self, *, queue: str | None = None, limit: int | None = None
    ) -> Iterator[QuarantinedDocument]:
        """Waiting documents, oldest first per queue (claimed ones are not listed)."""
        return listed(self._pages(queue), limit)

    def _pages(self, queue: str | None) -> Iterator[QuarantinedDocument | None]:
        for name in [queue] if queue is not None else self.queues():
            with self._lock:
                rows = sorted(
                    (since, key, self._records.get(key))
                    for key, since in self._waiting.get(name, {}).items()
                )
            for since, _, raw in rows:
                yield None if raw is None else QuarantinedDocument._load(raw, since)

    def purge(self, *, queue: str | None = None) -> int:
        """Delete every document (of ``queue``, or all); returns how many there were."""
        removed = 0
        with self._lock:
            for name in [queue] if queue is not None else sorted(self._queues):
                keys = {*self._waiting.pop(name, {}), *self._inflight.pop(name, {})}
                for key in keys:
                    self._records.pop(key, None)
                    self._since.pop(key, None)
                self._queues.discard(name)
                removed += len(keys)
            if removed:
                self._stats["purged"] += removed
        log.warning("quarantine_purged", queue=queue, documents=removed)
        return removed

    def stats(self) -> Mapping[str, Any]:
        """Counters: documents now (per queue), shed and replayed per class, oldest age."""
        with self._lock:
            depth = {queue: self._depth(queue) for queue in sorted(self._queues)}
            counters = dict(self._stats)
            oldest = [
                min(self._waiting[queue].values()) for queue in depth if self._waiting.get(queue)
            ]
            now_ms = self._now()
        shed = {name[5:]: n for name, n in counters.items() if name.startswith("shed:")}
        replayed = {name[9:]: n for name, n in counters.items() if name.startswith("replayed:")}
        return {
            "documents": sum(depth.values()),
            "by_queue": depth,
            "shed_total": dict(sorted(shed.items())),
            "replayed_total": dict(sorted(replayed.items())),
            "duplicates": counters.get("duplicate", 0),
            "purged": counters.get("purged", 0),
            "oldest_age_s": round(max(0.0, (now_ms - min(oldest)) / 1000.0), 3) if oldest else 0.0,
        }

    def now(self) -> float:
        """This store's clock, Unix seconds (for ages in listings)."""
        return self._now() / 1000.0
