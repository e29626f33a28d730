"""Give back the units a Redis broker lost: publish tracking and the orphan sweep.

See :mod:`tidegate.load.outstanding` for the hole this closes (a worker main process
SIGKILLed between kombu's ``BRPOP`` and its ``unacked`` write loses that message).

- :func:`track_publishes` (:mod:`tidegate.integrations.celery.tracking`) records every
  publish of the named tasks that carries an idempotency key, in whatever process
  publishes: the intake, a worker's aggregate, the parking mover. ``setup()`` turns it
  on for an app's :class:`GatedTask` tasks; a separate producer app calls it itself.
- :class:`OrphanSweep` runs in every worker's mover thread. Each worker beats; when
  one falls silent without a clean shutdown (a SIGKILLed main process), its death
  arms ``misses + 2`` sweeps (event ``orphan_sweep_armed``), and so does the broker's
  Redis starting again (its ``run_id`` changed since the last beat): a ``BRPOP`` it
  wrote to its append-only file and died before answering lost that message just the
  same. A Redis lock lets one worker sweep per interval. An armed sweep never reads
  the queues: it reads the oldest end of each queue list, kombu's ``unacked`` hash
  (in-flight sized), and the units pushed before that oldest message, in pages of
  :data:`SWEEP_PAGE` (why that suffices: :mod:`tidegate.integrations.celery.sweep_index`).
  A unit whose message has been missing for ``misses`` sweeps in a row is republished
  (event ``orphan_republished``). No Redis command it sends and no Python object it
  holds grows with the backlog, and neither does its time; unarmed, it costs one small
  Redis call per interval.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any, cast

from celery import Celery

from tidegate._redis import hash_pages, map_redis_errors
from tidegate.errors import BackendError, BackendUnavailable, ConfigurationError
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sweep_index import SweepIndex
from tidegate.integrations.celery.tracking import track_publishes
from tidegate.load import DeliveryLedger, DeliveryState
from tidegate.load.outstanding import (
    DEFAULT_MISSES,
    LANE_HEADER,
    SEQ_HEADER,
    Outstanding,
    OutstandingUnit,
    find_orphans,
)
from tidegate.load.protocols import ParkingStore
from tidegate.logging import get_logger, key_hash
from tidegate.settings import DEFAULT_SWEEP_INTERVAL_S

__all__ = [
    "DEFAULT_BEAT_S",
    "DEFAULT_SWEEP_INTERVAL_S",
    "SWEEP_PAGE",
    "OrphanSweep",
    "track_publishes",
]

log = get_logger("tidegate.celery")

#: Seconds between two beats of a worker; five missed beats make it dead.
DEFAULT_BEAT_S = 2.0
#: Messages or records read per Redis command: bounds each command's time and the
#: sweeping worker's memory, whatever the backlog.
SWEEP_PAGE = 500
#: Messages looked at per call at a list's oldest end (decoded in Lua, so a call stays
#: well under a millisecond); only a run of restored messages needs more than one.
HEAD_WALK = 50


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _message_id(message: Any) -> str | None:
    """The task id of a kombu message (a parsed JSON object), or None."""
    try:
        return str(message["headers"]["id"])
    except (KeyError, TypeError):
        return None


class OrphanSweep:
    """Republish units whose message the broker lost (see the module docstring).

    Args:
        app: publishes the republished units.
        outstanding: the registry (tidegate's Redis).
        ledger / parking: tidegate's delivery ledger and parking lot.
        broker: the broker's layout (lists, priority steps, ``unacked`` hash, key
            prefix) and a client to its Redis database.
        interval_s: seconds between sweeps, fleet-wide.
        misses: consecutive sweeps a message must be missing.
        beat_s: seconds between this worker's beats; a worker silent for five beats
            counts as dead.
        page: messages or records per Redis command.
    """

    def __init__(
        self,
        app: Celery,
        outstanding: Outstanding,
        *,
        ledger: DeliveryLedger,
        parking: ParkingStore,
        broker: RedisDepthProbe,
        interval_s: float = DEFAULT_SWEEP_INTERVAL_S,
        misses: int = DEFAULT_MISSES,
        beat_s: float = DEFAULT_BEAT_S,
        page: int = SWEEP_PAGE,
    ) -> None:
        if not interval_s > 0:
            raise ConfigurationError(f"interval_s must be > 0, got {interval_s!r}")
        if misses < 1:
            raise ConfigurationError(f"misses must be >= 1, got {misses!r}")
        if not beat_s > 0:
            raise ConfigurationError(f"beat_s must be > 0, got {beat_s!r}")
        if page < 1:
            raise ConfigurationError(f"page must be >= 1, got {page!r}")
        self.app = app
        self.outstanding = outstanding
        self.ledger = ledger
        self.parking = parking
        self.broker = broker
        self.interval_s = interval_s
        self.misses = misses
        self.beat_s = beat_s
        self.page = page
        self.index = SweepIndex(outstanding)
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._token = uuid.uuid4().hex
        self._next = 0.0
        self._next_beat = 0.0
        self._broker_run_id: str | None = None
        self._run_id_readable = True

    @classmethod
    def for_app(cls, app: Celery, outstanding: Outstanding, **kwargs: Any) -> OrphanSweep | None:
        """The sweep for ``app``'s Redis broker, or None for another broker (AMQP
        brokers track unacknowledged deliveries themselves)."""
        url = str(app.conf.broker_url or "")
        if not url.startswith(("redis://", "rediss://", "unix://")):
            return None
        broker = RedisDepthProbe.from_url(url, transport_options=app.conf.broker_transport_options)
        return cls(app, outstanding, broker=broker, **kwargs)

    @property
    def dead_after_s(self) -> float:
        """Silence after which a worker counts as dead."""
        return 5 * self.beat_s

    def beat(self) -> int:
        """Say this worker is alive; arm the sweep if another one died. Returns how
        many dead workers this beat found."""
        # ``misses`` sweeps to count a loss, one more to confirm a push nobody confirmed.
        sweeps = self.misses + 2
        dead = self.outstanding.beat(self.worker, dead_after_s=self.dead_after_s, arm_sweeps=sweeps)
        if dead:
            log.warning(
                "orphan_sweep_armed", reason="worker_died", dead_workers=dead, sweeps=sweeps
            )
        if self._broker_restarted():
            self.outstanding.arm(sweeps)
            log.warning(
                "orphan_sweep_armed", reason="broker_restarted", dead_workers=0, sweeps=sweeps
            )
        return dead

    def _broker_restarted(self) -> bool:
        """The broker's Redis is another run of the server than at this worker's last
        beat: it died and started again (on its append-only file), or failed over.

        A message it popped for a ``BRPOP`` and wrote to its file before it died, but
        never answered (or whose answer the dying socket dropped), is in no list and not
        in ``unacked``: lost, as with a killed main process (``tidegate demo --chaos
        redis-restart``, once in about a dozen runs). A server that refuses ``INFO`` (an
        ACL without it) is not watched; the death of a worker still arms the sweep."""
        if not self._run_id_readable:
            return False
        try:
            with map_redis_errors("broker run id"):
                info = self.broker.client.info("server")
        except BackendUnavailable:
            raise
        except BackendError as exc:
            self._run_id_readable = False
            log.warning("orphan_sweep_run_id_unreadable", error=str(exc)[:200])
            return False
        run_id = str(info.get("run_id", "")) or None
        before, self._broker_run_id = self._broker_run_id, run_id
        return before is not None and run_id is not None and run_id != before

    def retire(self) -> None:
        """This worker stops cleanly: its silence must not arm a sweep."""
        self.outstanding.retire(self.worker)

    def maybe_sweep(self, now: float | None = None) -> int:
        """Beat when due; sweep if this process's interval has passed, a sweep is armed
        and no other worker holds the fleet's turn. Returns how many units were
        republished."""
        now = time.monotonic() if now is None else now
        if now >= self._next_beat:
            self._next_beat = now + self.beat_s
            self.beat()
        if now < self._next:
            return 0
        self._next = now + self.interval_s
        with map_redis_errors("sweep lock"):
            turn = self.outstanding.client.set(
                self.outstanding.lock_key,
                self._token,
                nx=True,
                px=max(1, int(self.interval_s * 900)),
            )
        if not turn or not self.outstanding.take_armed_sweep():
            return 0
        return self.sweep_once()

    def sweep_once(self) -> int:
        """One look at the units that can have been lost; returns how many were
        republished. Reads, in this order: the sequence, each list's oldest end,
        ``unacked``, the candidates (see :mod:`tidegate.integrations.celery.sweep_index`)."""
        if self.index.needs_indexing():
            self._index_older_records()
        seq = self.index.sequence()
        present: set[str] = set()
        bounds: dict[str, int] = {}
        for queue in self.outstanding.queues():
            for step in self.broker.priority_steps:
                lane = self.broker.layout.lane(queue, step)
                for rows in self.index.unconfirmed(lane, self.page):
                    self.index.stamp_unconfirmed(lane, rows, seq)
                reading = self.index.read_head(
                    self.broker.list_key(queue, step), self.broker.client, seq=seq, walk=HEAD_WALK
                )
                present.update(reading.restored)
                if reading.bound is None:
                    log.warning("orphan_sweep_queue_skipped", queue=queue, reason=reading.reason)
                else:
                    bounds[lane] = reading.bound
        present.update(self._unacked_task_ids())
        republished = 0
        for lane, bound in bounds.items():
            for page in self.index.candidates(lane, bound, self.page):
                republished += self._judge(page, present)
        return republished

    def _unacked_task_ids(self) -> set[str]:
        """The task ids in kombu's ``unacked`` hash: the fleet's in-flight messages."""
        ids: set[str] = set()
        unacked = self.broker.unacked_hash
        for entries in hash_pages(self.broker.client, unacked, self.page, "sweep read unacked"):
            for raw in entries.values():  # kombu's entry: [message, exchange, routing_key]
                entry = _loads(raw)
                if isinstance(entry, list) and entry and (i := _message_id(entry[0])):
                    ids.add(i)
        return ids

    def _judge(self, page: list[OutstandingUnit], present: set[str]) -> int:
        """Count one page of candidates missing or present; republish the orphans."""
        misses = self.outstanding.misses_of([u.key for u in page])
        verdict = find_orphans(
            page, present_task_ids=present, parked_keys=set(), misses=misses, threshold=self.misses
        )
        back = [u.key for u in page if u.task_id in present and u.key in misses]
        if back or verdict.misses:
            self.outstanding.store_misses(verdict, present=back)
        return sum(self._republish(unit) for unit in verdict.orphans)

    def _index_older_records(self) -> None:
        """Once after an upgrade: records written without an index entry join it as
        unconfirmed (parked units excepted). Reads the registry in pages, so it costs
        one pass over the backlog, once; a new deployment never runs it."""
        scratch, client = self.outstanding.present_key, self.outstanding.client
        with map_redis_errors("sweep scratch"):
            client.delete(scratch)
        try:
            for keys in self.parking.iter_keys(self.page):
                with map_redis_errors("sweep scratch"):
                    pipe = client.pipeline(transaction=False)
                    pipe.sadd(scratch, *keys)
                    pipe.pexpire(scratch, max(1, int(self.interval_s * 2000)))
                    pipe.execute()
            indexed = 0
            units_key = self.outstanding.units_key
            for raw in hash_pages(client, units_key, self.page, "outstanding scan"):
                keys = [k.decode() for k in raw]
                with map_redis_errors("sweep scratch"):
                    hits = cast("list[int]", client.smismember(scratch, keys))
                parked = {k for k, hit in zip(keys, hits, strict=True) if hit}
                indexed += self.index.index_page(raw, parked)
            self.index.mark_indexed()
            log.info("outstanding_indexed", records=indexed)
        finally:
            with map_redis_errors("sweep scratch"):
                client.unlink(scratch)

    def _republish(self, unit: OutstandingUnit) -> int:
        if self.ledger.state(self._downstream(unit), unit.key) is DeliveryState.DELIVERED:
            self.outstanding.settle(unit.key)
            return 0
        # tidegate never reads a republished unit's result: without ignore_result a
        # Redis result backend subscribes to every one of them, for good.
        # Recorded here too, for a process that does not track its publishes; where it
        # does, the tracker's own record replaces this one and this confirm is a no-op.
        task_id = str(uuid.uuid4())
        fresh = OutstandingUnit(unit.key, unit.task, task_id, unit.queue, unit.args, unit.kwargs)
        s0 = self.outstanding.record(fresh)  # priority 0: its lane is the queue
        self.app.send_task(
            unit.task,
            args=unit.args,
            kwargs=unit.kwargs,
            queue=unit.queue,
            task_id=task_id,
            headers={SEQ_HEADER: s0, LANE_HEADER: unit.queue},
            ignore_result=True,
        )
        self.outstanding.pushed(unit.key, unit.queue, s0)
        log.warning(
            "orphan_republished",
            key_hash=key_hash(unit.key),
            task=unit.task,
            queue=unit.queue,
            lost_task_id=unit.task_id,
            task_id=task_id,
        )
        return 1

    def _downstream(self, unit: OutstandingUnit) -> str:
        task = self.app.tasks.get(unit.task)
        return str(getattr(task, "downstream", "") or "")
