"""The quarantine: where shed documents wait, durably, until the surge clears.

Shedding must not mean losing. A document the intake refuses to queue under sustained
overload is stored here in full — payload, class, queue, task, the reason and the
queue depth at that moment, the time — and given back through the normal intake
once its queue has drained to the low watermark (the monitor does it automatically,
at a bounded rate; ``tidegate quarantine replay`` does it on demand).

Layout (built by :meth:`tidegate.keys.Keyspace.quarantine`)::

    <prefix>:{quarantine}:records           hash  key -> record JSON
    <prefix>:{quarantine}:since             hash  key -> quarantine time (ms, fleet clock)
    <prefix>:{quarantine}:waiting:<queue>   zset  FIFO line per queue, by quarantine time
    <prefix>:{quarantine}:inflight:<queue>  zset  claimed for replay, by lease expiry
    <prefix>:{quarantine}:queues            set   queues with documents
    <prefix>:{quarantine}:stats             hash  shed:<class>, replayed:<class>, duplicate, purged

Documents are keyed by their idempotency key, so the same document shed twice is one
record. Replay is claim → queue → ack, crash-safe like parking: a replayer that dies
between claim and ack loses nothing (the claim's lease expires and the document goes
back in line), at the cost of possibly queueing it twice — which the idempotency key
absorbs downstream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import redis

from tidegate._redis import clock_ms, lua_script, map_redis_errors, script_now_ms
from tidegate.events import DocumentShed, emit
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load._listing import listed
from tidegate.logging import get_logger, key_hash

__all__ = ["CLAIM_LEASE_MS", "Quarantine", "QuarantineClaim", "QuarantinedDocument"]

log = get_logger("tidegate.load")

#: How long a replayer has to queue claimed documents and ack them, ms.
CLAIM_LEASE_MS = 60_000


@dataclass(frozen=True, slots=True)
class QuarantinedDocument:
    """One shed document.

    Attributes:
        key: its idempotency key (the record's identity).
        document_class: the class name (``BULK_BL_PDF``, ``IFTSTA`` …).
        queue: the queue it was meant for.
        task: the task (Celery task name, or RQ function path) that processes it.
        payload: the task's argument, in full; never logged.
        reason: why it was shed (``sustained_overload``).
        depth: the queue's depth when it was shed.
        sender: ``"celery"`` or ``"rq"``: how a replay queues it.
        quarantined_at: Unix seconds on the store's clock (Redis TIME unless one was injected).
    """

    key: str
    document_class: str
    queue: str
    task: str
    payload: dict[str, Any] = field(default_factory=dict)
    reason: str = "sustained_overload"
    depth: int = 0
    sender: str = "celery"
    quarantined_at: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The record without its payload, for listings and logs."""
        data = asdict(self)
        del data["payload"]
        return data

    def _record(self) -> str:
        data = asdict(self)
        del data["quarantined_at"]
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def _load(cls, raw: bytes | str, since_ms: float) -> QuarantinedDocument:
        return cls(**json.loads(raw), quarantined_at=float(since_ms) / 1000.0)


@dataclass(frozen=True, slots=True)
class QuarantineClaim:
    """What one :meth:`Quarantine.claim_batch` got.

    Attributes:
        documents: the claimed documents, oldest first.
        in_replay: documents of the queue that another replayer holds (claimed, lease
            not expired): skipped, so no two replays queue one document.
    """

    documents: list[QuarantinedDocument]
    in_replay: int


class Quarantine:
    """The shed documents of one namespace.

    Args:
        client: a sync Redis client.
        prefix: key prefix (see the module docstring for the keys).
        clock: ms since the epoch for quarantine times, leases and ages; ``None`` =
            Redis ``TIME``, the fleet clock (tests pass a
            :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self._clock = clock
        self._keys = keys = Keyspace(prefix).quarantine()
        self._records, self._since, self._queues, self._stats = (
            keys.records,
            keys.since,
            keys.queues,
            keys.stats,
        )
        self._add = client.register_script(lua_script("quarantine_add", "tidegate.load"))
        self._claim = client.register_script(lua_script("lease_claim", "tidegate.load"))
        self._ack = client.register_script(lua_script("quarantine_ack", "tidegate.load"))

    def _now_arg(self) -> str:
        return script_now_ms(self._clock)

    def _now_ms(self) -> float:
        return clock_ms(self.client, self._clock, "quarantine clock")

    def _waiting(self, queue: str) -> str:
        return self._keys.waiting(queue)

    def _inflight(self, queue: str) -> str:
        return self._keys.inflight(queue)

    # -- shedding ------------------------------------------------------------------------

    def add(self, document: QuarantinedDocument) -> tuple[QuarantinedDocument, bool]:
        """Store ``document``; returns the stored record and whether it is new.

        The same idempotency key shed again keeps the first record (and counts a
        ``duplicate``). Logs ``document_shed``.
        """
        with map_redis_errors("quarantine"):
            added, since = self._add(
                [
                    self._records,
                    self._since,
                    self._waiting(document.queue),
                    self._queues,
                    self._stats,
                ],
                [
                    self._now_arg(),
                    document.key,
                    document._record(),
                    document.queue,
                    document.document_class,
                ],
            )
        stored = QuarantinedDocument(
            **{**asdict(document), "quarantined_at": float(since) / 1000.0}
        )
        emit(
            DocumentShed(
                key_hash(document.key),
                document.document_class,
                document.queue,
                document.reason,
                document.depth,
                duplicate=added in (b"0", "0", 0),
            )
        )
        return stored, added not in (b"0", "0", 0)

    # -- replay --------------------------------------------------------------------------

    def claim(
        self, queue: str, limit: int, *, lease_ms: int = CLAIM_LEASE_MS
    ) -> list[QuarantinedDocument]:
        """Claim up to ``limit`` of ``queue``'s oldest documents for replay.

        Queue each one and :meth:`ack` it, or :meth:`release` it to put it back in line.
        """
        return self.claim_batch(queue, limit, lease_ms=lease_ms).documents

    def claim_batch(
        self, queue: str, limit: int, *, lease_ms: int = CLAIM_LEASE_MS
    ) -> QuarantineClaim:
        """:meth:`claim`, also saying how many documents another replayer holds.

        The count is read in the same atomic step as the claim, so two replays started
        at once report between them exactly what the other one took.
        """
        with map_redis_errors("claim quarantined"):
            if limit < 1:
                return QuarantineClaim([], int(self.client.zcard(self._inflight(queue))))
            held, *flat = self._claim(
                [self._waiting(queue), self._inflight(queue), self._records, self._since],
                [self._now_arg(), int(limit), int(lease_ms), "oldest"],
            )
        documents = [
            QuarantinedDocument._load(flat[i + 1], float(flat[i + 2]))
            for i in range(0, len(flat), 3)
        ]
        return QuarantineClaim(documents, int(held))

    def ack(self, document: QuarantinedDocument) -> bool:
        """Forget a document that was queued again; counts it as replayed."""
        with map_redis_errors("ack quarantined"):
            removed = self._ack(
                [
                    self._inflight(document.queue),
                    self._waiting(document.queue),
                    self._records,
                    self._since,
                    self._stats,
                ],
                [document.key, document.document_class],
            )
        return bool(int(removed))

    def release(self, document: QuarantinedDocument) -> None:
        """Put a claimed document back in line at its original place."""
        with map_redis_errors("release quarantined"):
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(self._inflight(document.queue), document.key)
            pipe.zadd(self._waiting(document.queue), {document.key: document.quarantined_at * 1000})
            pipe.execute()

    # -- inspection ----------------------------------------------------------------------

    def queues(self) -> list[str]:
        """Queues that have (or had) quarantined documents."""
        with map_redis_errors("quarantine queues"):
            members = cast("set[bytes]", self.client.smembers(self._queues))
        return sorted(m.decode() for m in members)

    def __len__(self) -> int:
        with map_redis_errors("quarantine count"):
            return int(self.client.hlen(self._records))

    def depth_by_queue(self) -> dict[str, int]:
        """Documents not yet replayed, per queue (waiting + claimed)."""
        queues = self.queues()
        if not queues:
            return {}
        with map_redis_errors("quarantine depth"):
            pipe = self.client.pipeline(transaction=False)
            for queue in queues:
                pipe.zcard(self._waiting(queue))
                pipe.zcard(self._inflight(queue))
            counts = pipe.execute()
        return {q: int(counts[2 * i]) + int(counts[2 * i + 1]) for i, q in enumerate(queues)}

    def depth(self, queue: str) -> int:
        """Documents of ``queue`` not yet replayed (waiting + claimed)."""
        with map_redis_errors("quarantine depth"):
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(self._waiting(queue))
            pipe.zcard(self._inflight(queue))
            waiting, inflight = pipe.execute()
        return int(waiting) + int(inflight)

    def iter(
        self, *, queue: str | None = None, limit: int | None = None
    ) -> Iterator[QuarantinedDocument]:
        """Waiting documents, oldest first per queue (claimed ones are not listed)."""
        return listed(self._pages(queue), limit)

    def _pages(self, queue: str | None) -> Iterator[QuarantinedDocument | None]:
        for name in [queue] if queue is not None else self.queues():
            start = 0
            while True:
                with map_redis_errors("quarantine list"):
                    rows = cast(
                        "list[tuple[bytes, float]]",
                        self.client.zrange(
                            self._waiting(name), start, start + 499, withscores=True
                        ),
                    )
                    raws = self.client.hmget(self._records, [k for k, _ in rows]) if rows else []
                if not rows:
                    break
                for (_, since), raw in zip(rows, raws, strict=True):
                    yield None if raw is None else QuarantinedDocument._load(raw, since)
                start += 500

    def purge(self, *, queue: str | None = None) -> int:
        """Delete every document (of ``queue``, or all); returns how many there were."""
        names = [queue] if queue is not None else self.queues()
        removed = 0
        with map_redis_errors("quarantine purge"):
            for name in names:
                keys = [
                    k
                    for key in (self._waiting(name), self._inflight(name))
                    for k in cast("list[bytes]", self.client.zrange(key, 0, -1))
                ]
                pipe = self.client.pipeline(transaction=True)
                if keys:
                    pipe.hdel(self._records, *keys)
                    pipe.hdel(self._since, *keys)
                pipe.delete(self._waiting(name), self._inflight(name))
                pipe.srem(self._queues, name)
                pipe.execute()
                removed += len(set(keys))
            if removed:
                self.client.hincrby(self._stats, "purged", removed)
        log.warning("quarantine_purged", queue=queue, documents=removed)
        return removed

    def stats(self) -> Mapping[str, Any]:
        """Counters: documents now (per queue), shed and replayed per class, oldest age."""
        depth = self.depth_by_queue()
        with map_redis_errors("quarantine stats"):
            counters = cast("dict[bytes, bytes]", self.client.hgetall(self._stats))
            pipe = self.client.pipeline(transaction=False)
            for queue in depth:
                pipe.zrange(self._waiting(queue), 0, 0, withscores=True)
            firsts = pipe.execute() if depth else []
            now_ms = self._now_ms()
        oldest = [rows[0][1] for rows in firsts if rows]
        shed: dict[str, int] = {}
        replayed: dict[str, int] = {}
        for raw_name, raw_value in counters.items():
            name, value = raw_name.decode(), int(raw_value)
            if name.startswith("shed:"):
                shed[name[5:]] = value
            elif name.startswith("replayed:"):
                replayed[name[9:]] = value
        return {
            "documents": sum(depth.values()),
            "by_queue": depth,
            "shed_total": dict(sorted(shed.items())),
            "replayed_total": dict(sorted(replayed.items())),
            "duplicates": int(counters.get(b"duplicate", 0)),
            "purged": int(counters.get(b"purged", 0)),
            "oldest_age_s": round(max(0.0, (now_ms - min(oldest)) / 1000.0), 3) if oldest else 0.0,
        }

    def now(self) -> float:
        """The fleet clock, Unix seconds (for ages in listings)."""
        with map_redis_errors("quarantine clock"):
            return self._now_ms() / 1000.0
