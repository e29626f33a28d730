"""Give back the units a Redis broker lost: publish tracking and the orphan sweep.

See :mod:`tidegate.load.outstanding` for the hole this closes (a worker main process
SIGKILLed between kombu's ``BRPOP`` and its ``unacked`` write loses that message).

- :func:`track_publishes` records every publish of the named tasks that carries an
  idempotency key (``before_task_publish``, in whatever process publishes: the
  intake, a worker's aggregate, the parking mover). ``setup()`` turns it on for an
  app's :class:`GatedTask` tasks; a separate producer app calls it itself.
- :class:`OrphanSweep` runs in every worker's mover thread. Each worker beats; when
  one falls silent without a clean shutdown (a SIGKILLed main process), its death
  arms ``misses + 1`` sweeps (event ``orphan_sweep_armed``), and a Redis lock lets one
  worker sweep per interval. An armed sweep reads the broker's queue lists, its
  ``unacked`` hash and the parking lot in pages of :data:`SWEEP_PAGE` into a scratch
  set in Redis, walks the records in pages against it, and republishes a unit whose
  message has been missing for ``misses`` sweeps in a row (event
  ``orphan_republished``). No Redis command it sends and no Python object it holds
  grows with the backlog; unarmed, it costs one small Redis call per interval.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from celery import Celery, signals

from tidegate._redis import hash_pages, map_redis_errors
from tidegate.delivery import unit_key
from tidegate.errors import BackendError, ConfigurationError
from tidegate.load import DeliveryLedger, DeliveryState, ParkingLot
from tidegate.load.depth import RedisDepthProbe
from tidegate.load.outstanding import (
    DEFAULT_MISSES,
    Outstanding,
    OutstandingUnit,
    find_orphans,
)
from tidegate.logging import get_logger, key_hash

__all__ = [
    "DEFAULT_BEAT_S",
    "DEFAULT_SWEEP_INTERVAL_S",
    "SWEEP_PAGE",
    "OrphanSweep",
    "track_publishes",
]

log = get_logger("tidegate.celery")

#: Seconds between two sweeps of the fleet (``TIDEGATE_SWEEP_INTERVAL_S``).
DEFAULT_SWEEP_INTERVAL_S = 30.0
#: Seconds between two beats of a worker; five missed beats make it dead.
DEFAULT_BEAT_S = 2.0
#: Messages or records read per Redis command: bounds each command's time and the
#: sweeping worker's memory, whatever the backlog.
SWEEP_PAGE = 500

_TRACKERS: dict[tuple[int, str], Any] = {}
_TRACKERS_LOCK = threading.Lock()


def track_publishes(
    tasks: Iterable[str] | None,
    outstanding: Outstanding,
    *,
    app: Celery | None = None,
) -> Callable[[], None]:
    """Record every publish of ``tasks`` (names) in ``outstanding``; returns the
    function that stops it.

    With ``tasks=None`` and an ``app``, the app's :class:`GatedTask` tasks are
    tracked (looked up at the first publish, once the app is finalized). Calling it
    twice for the same registry is harmless. A record that cannot be written (Redis
    down) is logged; the publish goes on — the sweep only protects what it knows.
    """
    if tasks is None and app is None:
        raise ConfigurationError("track_publishes needs task names or an app")
    names: set[str] | None = None if tasks is None else set(tasks)

    def tracked() -> set[str]:
        nonlocal names
        if names is None:
            from tidegate.integrations.celery.gated import GatedTask

            assert app is not None
            names = {n for n, t in app.tasks.items() if isinstance(t, GatedTask)}
        return names

    def on_publish(
        sender: str | None = None,
        body: Any = None,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        **_: Any,
    ) -> None:
        if sender is None or headers is None or sender not in tracked():
            return
        if not isinstance(body, (list, tuple)) or len(body) < 2:
            return  # not protocol 2: nothing tidegate publishes
        args, kwargs = body[0], body[1]
        key = unit_key(args, kwargs)  # None: not a unit, not tracked
        if key is None or not routing_key:
            return
        unit = OutstandingUnit(key, sender, str(headers["id"]), routing_key, list(args), kwargs)
        try:
            outstanding.record(unit)
        except BackendError as exc:
            log.warning(
                "outstanding_record_failed", key_hash=key_hash(key), error=type(exc).__name__
            )

    ident = (id(app) if app is not None else 0, outstanding.units_key)

    def untrack() -> None:
        with _TRACKERS_LOCK:
            handler = _TRACKERS.pop(ident, None)
        if handler is not None:
            signals.before_task_publish.disconnect(handler)

    with _TRACKERS_LOCK:
        if ident in _TRACKERS:
            return untrack
        _TRACKERS[ident] = on_publish
    signals.before_task_publish.connect(on_publish, weak=False)
    return untrack


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
        parking: ParkingLot,
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
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._token = uuid.uuid4().hex
        self._next = 0.0
        self._next_beat = 0.0

    @classmethod
    def for_app(cls, app: Celery, outstanding: Outstanding, **kwargs: Any) -> OrphanSweep | None:
        """The sweep for ``app``'s Redis broker, or None for another broker (AMQP
        brokers track unacknowledged deliveries themselves)."""
        url = str(app.conf.broker_url or "")
        if not url.startswith(("redis://", "rediss://", "unix://")):
            return None
        interval = float(os.environ.get("TIDEGATE_SWEEP_INTERVAL_S", DEFAULT_SWEEP_INTERVAL_S))
        broker = RedisDepthProbe.from_url(url, transport_options=app.conf.broker_transport_options)
        return cls(app, outstanding, broker=broker, interval_s=interval, **kwargs)

    @property
    def dead_after_s(self) -> float:
        """Silence after which a worker counts as dead."""
        return 5 * self.beat_s

    def beat(self) -> int:
        """Say this worker is alive; arm the sweep if another one died. Returns how
        many dead workers this beat found."""
        dead = self.outstanding.beat(
            self.worker, dead_after_s=self.dead_after_s, arm_sweeps=self.misses + 1
        )
        if dead:
            log.warning("orphan_sweep_armed", dead_workers=dead, sweeps=self.misses + 1)
        return dead

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

    def _collect_present(self) -> None:
        """Fill the scratch set: ``t:<task id>`` of every message in the broker's lists
        and ``unacked``, ``k:<key>`` of every parked unit.

        Lists first, ``unacked`` second: a message moving from one to the other while
        the pages are read is seen in at least one of them.
        """
        scratch, client = self.outstanding.present_key, self.outstanding.client
        with map_redis_errors("sweep scratch"):
            client.delete(scratch)
        for queue in self.outstanding.queues():
            for name in self.broker.list_keys(queue):
                start = 0
                while True:
                    with map_redis_errors("sweep read queue"):
                        items = cast(
                            "list[bytes]",
                            self.broker.client.lrange(name, start, start + self.page - 1),
                        )
                    self._add_present("t:", (i for raw in items if (i := _message_id(_loads(raw)))))
                    if len(items) < self.page:
                        break
                    start += self.page
        unacked = self.broker.unacked_hash
        for entries in hash_pages(self.broker.client, unacked, self.page, "sweep read unacked"):
            ids = []
            for raw in entries.values():  # kombu's entry: [message, exchange, routing_key]
                entry = _loads(raw)
                if isinstance(entry, list) and entry and (i := _message_id(entry[0])):
                    ids.append(i)
            self._add_present("t:", ids)
        for keys in self.parking.iter_keys(self.page):
            self._add_present("k:", keys)

    def _add_present(self, kind: str, values: Iterable[str]) -> None:
        members = [kind + value for value in values]
        if members:
            with map_redis_errors("sweep scratch"):
                pipe = self.outstanding.client.pipeline(transaction=False)
                pipe.sadd(self.outstanding.present_key, *members)
                # A sweeper that dies mid-way must not leave the scratch set behind.
                pipe.pexpire(self.outstanding.present_key, max(1, int(self.interval_s * 2000)))
                pipe.execute()

    def _split_present(
        self, units: list[OutstandingUnit]
    ) -> tuple[set[str], set[str], list[OutstandingUnit]]:
        """Which of ``units`` have their message in the broker, which are parked, and
        which of the missing were not yet counted in this sweep (a scan may repeat)."""
        scratch = self.outstanding.present_key
        with map_redis_errors("sweep check"):
            pipe = self.outstanding.client.pipeline(transaction=False)
            pipe.smismember(scratch, [f"t:{u.task_id}" for u in units])
            pipe.smismember(scratch, [f"k:{u.key}" for u in units])
            queued, parked = pipe.execute()
        present = {u.task_id for u, hit in zip(units, queued, strict=True) if hit}
        parked_keys = {u.key for u, hit in zip(units, parked, strict=True) if hit}
        missing = [u for u in units if u.task_id not in present and u.key not in parked_keys]
        if missing:
            # HSCAN may return a record twice while the hash is resized: count it once.
            with map_redis_errors("sweep check"):
                pipe = self.outstanding.client.pipeline(transaction=False)
                for unit in missing:
                    pipe.sadd(scratch, f"s:{unit.key}")
                fresh = pipe.execute()
            missing = [u for u, new in zip(missing, fresh, strict=True) if new]
        return present, parked_keys, missing

    def sweep_once(self) -> int:
        """One look at every outstanding unit, page by page; returns how many were
        republished."""
        self._collect_present()
        republished = 0
        try:
            for page in self.outstanding.iter_pages(self.page):
                present, parked, missing = self._split_present(page)
                here = [u for u in page if u.task_id in present or u.key in parked]
                misses = self.outstanding.misses_of([u.key for u in [*missing, *here]])
                verdict = find_orphans(
                    [*missing, *(u for u in here if u.key in misses)],
                    present_task_ids=present,
                    parked_keys=parked,
                    misses=misses,
                    threshold=self.misses,
                )
                back = [u.key for u in here if u.key in misses]
                if back or verdict.misses:
                    self.outstanding.store_misses(verdict, present=back)
                for unit in verdict.orphans:
                    republished += self._republish(unit)
        finally:
            with map_redis_errors("sweep scratch"):
                self.outstanding.client.unlink(self.outstanding.present_key)
        return republished

    def _republish(self, unit: OutstandingUnit) -> int:
        if self.ledger.state(self._downstream(unit), unit.key) is DeliveryState.DELIVERED:
            self.outstanding.settle(unit.key)
            return 0
        # tidegate never reads a republished unit's result: without ignore_result a
        # Redis result backend subscribes to every one of them, for good.
        result = self.app.send_task(
            unit.task, args=unit.args, kwargs=unit.kwargs, queue=unit.queue, ignore_result=True
        )
        self.outstanding.record(
            OutstandingUnit(unit.key, unit.task, str(result.id), unit.queue, unit.args, unit.kwargs)
        )
        log.warning(
            "orphan_republished",
            key_hash=key_hash(unit.key),
            task=unit.task,
            queue=unit.queue,
            lost_task_id=unit.task_id,
            task_id=str(result.id),
        )
        return 1

    def _downstream(self, unit: OutstandingUnit) -> str:
        task = self.app.tasks.get(unit.task)
        return str(getattr(task, "downstream", "") or "")
