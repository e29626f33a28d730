"""The orphan sweep's reads: which units can have been lost, without reading the queues.

A kombu list is FIFO: LPUSH at one end, BRPOP at the other (each priority step is a
list of its own, the queue's name plus kombu's separator and the step, see
:mod:`tidegate.integrations.celery.kombu_redis`; each is FIFO on its own). So if *H* is the oldest
message of a list, every message pushed to that list before *H* has been popped. Two
publish sequences, from one counter, make "pushed before *H*" decidable:

- ``s0``, handed out just before kombu's LPUSH (``before_task_publish``), travels in
  the message's headers (``tidegate_seq``);
- ``s1``, handed out just after the LPUSH returned (``after_task_publish``), is the
  unit's score in the ``pushed:<lane>`` index.

If a unit *R* was pushed after *H*, then ``s0(H)`` was handed out before H's push,
before R's push, before ``s1(R)``: ``s0(H) < s1(R)``. Hence ``s1(R) < s0(H)`` means *R*
was pushed before *H* and has left the list. A concurrent publisher can interleave
its INCR and LPUSH with ours in any order; the argument never compares two ``s0`` or
two ``s1``, so it holds all the same. An empty list bounds at ``seq + 1``, ``seq`` read
before the list: the sequence only grows, so every unit pushed after the read has a
larger ``s1``. Each priority list is bounded on its own: the publish tracker computes
the list a message goes to (its *lane*: kombu clamps the priority to 0..9 and takes the
largest step below it) and indexes the unit under ``pushed:<lane>``.

The sweep's candidates are the units of ``pushed:<lane>`` with ``s1`` below that
list's bound (``ZRANGEBYSCORE`` with ``LIMIT``, paged on the score): those that left
the list, i.e. in flight (in ``unacked``), settled moments ago, or lost. Their number
is the fleet's in-flight work, not the backlog; each Redis command reads a page. The
queue heads are read first, kombu's ``unacked`` hash (in-flight sized) second, the
candidates last: a candidate had left its list before the head was read, so it is in
``unacked`` when that is read, or was acked (its unit settled or published anew), or
is lost.

Edges, each handled here or in the sweep:

- *kombu restores a message* (visibility timeout, a worker's warm shutdown) by RPUSHing
  it back at the oldest end with ``headers.redelivered``: the head walk
  (``queue_head.lua``) collects those task ids as present and bounds at the first
  message behind them. A *reject with requeue* (a pool process lost, with
  ``task_reject_on_worker_lost``) LPUSHes it at the newest end: tidegate's broker
  channel reports it and the unit gets a new ``s1`` (:meth:`Outstanding.requeued`).
- *Republished units* (the parking mover, the sweep itself, a retry) are new publishes:
  new ``s0``/``s1``; the record of the older message is replaced. A *parked* unit
  leaves the index (:meth:`Outstanding.hold`) until the mover publishes it again.
- *A head without a sequence* (published by an untracked producer, e.g. the DLQ
  replay, or by an older tidegate): nothing can be concluded for that queue in this
  sweep; it is skipped and said (``orphan_sweep_queue_skipped``), and the next sweep
  sees another head.
- *A publish never confirmed* (the publisher died after LPUSH, before ``s1``): the unit
  stays in ``published:<lane>``. A sweep that finds it there a second time (an interval
  later: a publish is long over) gives it ``s1 =`` the ``seq`` read at that sweep's
  start, which is at least the ``s0`` of every message pushed before it.
- *Records of an older version* (no index entry): the first armed sweep after the
  upgrade indexes them once as unconfirmed, skipping parked units; ``indexed`` marks it
  done (set at the first record into an empty registry, so a new deployment never pays).
- *Redis restarts*: the sequence is ``max(seq + 1, TIME in µs)``, so a restart that lost
  the tail of its append-only file never hands out a number a queued message already
  carries. Records and index entries are written in one script, so they survive or
  are lost together.

A unit missing (neither present nor parked) must be missing for ``misses`` sweeps in a
row before it is republished; the ledger settles a stale record of a delivered unit
instead of republishing it, and a copy that runs second finds the ledger at
``delivered`` or ``sending`` and does not send blindly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from tidegate._redis import lua_script, map_redis_errors, text
from tidegate.load.outstanding import Outstanding, OutstandingUnit

__all__ = ["HeadReading", "SweepIndex"]


@dataclass(frozen=True, slots=True)
class HeadReading:
    """What one kombu list's oldest end said (``queue_head.lua``).

    ``bound`` is None when nothing can be concluded (``reason`` says why);
    ``restored`` holds the task ids of messages kombu restored to the oldest end."""

    bound: int | None
    restored: list[str]
    reason: str = ""


class SweepIndex:
    """The reads of an armed sweep over one :class:`Outstanding` registry; every one is
    a page or a walk of bounded length, whatever the backlog."""

    def __init__(self, outstanding: Outstanding) -> None:
        self.outstanding = outstanding
        self.client = outstanding.client
        self._head = self.client.register_script(
            lua_script("queue_head", "tidegate.integrations.celery")
        )

    def sequence(self) -> int:
        """The last sequence handed out (0 before the first)."""
        with map_redis_errors("outstanding sequence"):
            raw = self.client.get(self.outstanding.seq_key)
        return int(cast("bytes", raw)) if raw else 0

    def read_head(self, list_key: str, broker: redis.Redis, *, seq: int, walk: int) -> HeadReading:
        """Bound one broker list from its oldest end, ``walk`` messages per call.

        ``seq`` is :meth:`sequence` read before. A run of restored messages longer than
        ``walk`` takes several calls; a pop between two of them can hide a message
        from the walk, but pops mean the list is being consumed, so a message that close
        to its oldest end is gone long before ``misses`` sweeps have passed.
        """
        restored: list[str] = []
        first = 1
        while True:
            with map_redis_errors("sweep read queue head"):
                reply = cast("list[Any]", self._head([list_key], [first, walk, seq], client=broker))
            status, bound = int(reply[0]), int(reply[1])
            restored.extend(text(item) for item in reply[3:])
            if status == 0:
                return HeadReading(bound, restored)
            if status != 2:
                reason = "head_without_sequence" if status == 1 else "head_unreadable"
                return HeadReading(None, restored, reason)
            first += walk

    def _by_score(self, key: str, below: str, page: int) -> Iterator[list[tuple[str, int]]]:
        """``(member, score)`` of a zset up to ``below``, ``page`` at a time; the scores
        are distinct sequences, so the last one read is the next page's cursor."""
        low = "-inf"
        while True:
            with map_redis_errors("sweep index read"):
                rows = cast(
                    "list[tuple[bytes, float]]",
                    self.client.zrangebyscore(key, low, below, start=0, num=page, withscores=True),
                )
            if rows:
                yield [(member.decode(), int(score)) for member, score in rows]
            if len(rows) < page:
                return
            low = f"({int(rows[-1][1])}"

    def candidates(self, lane: str, below: int, page: int) -> Iterator[list[OutstandingUnit]]:
        """The units of ``lane`` pushed with ``s1 < below``, ``page`` at a time."""
        for rows in self._by_score(self.outstanding.pushed_key(lane), f"({below}", page):
            units = self.units_of([key for key, _ in rows])
            if units:
                yield units

    def unconfirmed(self, lane: str, page: int) -> Iterator[list[tuple[str, int]]]:
        """``(key, s0)`` of the units of ``lane`` whose push is not confirmed."""
        yield from self._by_score(self.outstanding.published_key(lane), "+inf", page)

    def stamp_unconfirmed(self, lane: str, rows: list[tuple[str, int]], s1: int) -> int:
        """Units the last sweep also saw unconfirmed (same ``s0``) get ``s1``; the others
        are remembered as seen. Returns how many were stamped."""
        if not rows:
            return 0
        seen_key = self.outstanding.seen_key
        with map_redis_errors("sweep unconfirmed"):
            seen = cast("list[bytes | None]", self.client.hmget(seen_key, [k for k, _ in rows]))
        stamped, fresh = 0, {}
        for (key, s0), before in zip(rows, seen, strict=True):
            if before is not None and int(before) == s0:
                stamped += self.outstanding.pushed(key, lane, s0, s1=s1) > 0
            else:
                fresh[key] = s0
        if fresh:
            with map_redis_errors("sweep unconfirmed"):
                self.client.hset(seen_key, mapping=cast("dict[Any, Any]", fresh))
        return stamped

    def needs_indexing(self) -> bool:
        """True while records of an older version may lack an index entry."""
        with map_redis_errors("outstanding index"):
            return not self.client.exists(self.outstanding.indexed_key)

    def index_page(self, raw: Mapping[bytes, bytes], parked: set[str]) -> int:
        """Index one page of records (HSCAN) that have no entry, as unconfirmed under
        ``s0 = 0``; parked keys are left out. Returns how many were indexed."""
        out = self.outstanding
        units = [u for u in out.parse_units(raw) if u.key not in parked]
        if not units:
            return 0
        with map_redis_errors("outstanding index"):
            pipe = self.client.pipeline(transaction=False)
            for unit in units:
                pipe.zscore(out.published_key(unit.index_lane), unit.key)
                pipe.zscore(out.pushed_key(unit.index_lane), unit.key)
            scores = pipe.execute()
            pipe = self.client.pipeline(transaction=False)
            added = 0
            for i, unit in enumerate(units):
                if scores[2 * i] is None and scores[2 * i + 1] is None:
                    pipe.zadd(out.published_key(unit.index_lane), {unit.key: 0}, nx=True)
                    pipe.sadd(out.queues_key, unit.queue)
                    added += 1
            pipe.execute()
        return added

    def mark_indexed(self) -> None:
        with map_redis_errors("outstanding index"):
            self.client.set(self.outstanding.indexed_key, "1")

    def units_of(self, keys: list[str]) -> list[OutstandingUnit]:
        """The records of ``keys`` (a key settled meanwhile has none)."""
        if not keys:
            return []
        with map_redis_errors("outstanding read"):
            values = cast("list[bytes | None]", self.client.hmget(self.outstanding.units_key, keys))
        found = {k.encode(): v for k, v in zip(keys, values, strict=True) if v is not None}
        return self.outstanding.parse_units(found)
