"""Give back the units a Redis broker lost: publish tracking and the orphan sweep.

See :mod:`tidegate.load.outstanding` for the hole this closes (a worker main process
SIGKILLed between kombu's ``BRPOP`` and its ``unacked`` write loses that message).

- :func:`track_publishes` records every publish of the named tasks that carries an
  idempotency key (``before_task_publish``, in whatever process publishes: the
  intake, a worker's aggregate, the parking mover). ``setup()`` turns it on for an
  app's :class:`GatedTask` tasks; a separate producer app calls it itself.
- :class:`OrphanSweep` runs in every worker's mover thread; a Redis lock lets one of
  them sweep per interval. It reads the broker's queue lists and ``unacked`` hash in
  one ``MULTI`` and republishes a unit whose message has been missing for
  ``misses`` sweeps in a row (event ``orphan_republished``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from celery import Celery, signals

from tidegate._redis import map_redis_errors
from tidegate.errors import BackendError, ConfigurationError
from tidegate.load import DeliveryLedger, DeliveryState, ParkingLot
from tidegate.load.depth import RedisDepthProbe
from tidegate.load.outstanding import (
    DEFAULT_MISSES,
    Outstanding,
    OutstandingUnit,
    find_orphans,
)
from tidegate.logging import get_logger

__all__ = ["DEFAULT_SWEEP_INTERVAL_S", "OrphanSweep", "track_publishes"]

log = get_logger("tidegate.celery")

#: Seconds between two sweeps of the fleet (``TIDEGATE_SWEEP_INTERVAL_S``).
DEFAULT_SWEEP_INTERVAL_S = 30.0

_TRACKERS: dict[tuple[int, str], Any] = {}
_TRACKERS_LOCK = threading.Lock()


def _unit_key(args: Any, kwargs: Any) -> str | None:
    """The idempotency key a GatedTask would use, or None (then it is not tracked)."""
    if isinstance(kwargs, Mapping) and "idempotency_key" in kwargs:
        return str(kwargs["idempotency_key"])
    if args and isinstance(args[0], Mapping) and "key" in args[0]:
        return str(args[0]["key"])
    return None


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
        key = _unit_key(args, kwargs)
        if key is None or not routing_key:
            return
        unit = OutstandingUnit(key, sender, str(headers["id"]), routing_key, list(args), kwargs)
        try:
            outstanding.record(unit)
        except BackendError as exc:
            log.warning("outstanding_record_failed", key=key, error=type(exc).__name__)

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
    ) -> None:
        if not interval_s > 0:
            raise ConfigurationError(f"interval_s must be > 0, got {interval_s!r}")
        if misses < 1:
            raise ConfigurationError(f"misses must be >= 1, got {misses!r}")
        self.app = app
        self.outstanding = outstanding
        self.ledger = ledger
        self.parking = parking
        self.broker = broker
        self.interval_s = interval_s
        self.misses = misses
        self._token = uuid.uuid4().hex
        self._next = 0.0

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

    def maybe_sweep(self, now: float | None = None) -> int:
        """Sweep if this process's interval has passed and no other worker holds the
        fleet's turn; returns how many units were republished."""
        now = time.monotonic() if now is None else now
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
        return self.sweep_once() if turn else 0

    def _present_ids(self, queues: Iterable[str]) -> set[str]:
        """Message ids in the queues and in ``unacked``, read in one MULTI."""
        lists = [key for queue in sorted(set(queues)) for key in self.broker.list_keys(queue)]
        with map_redis_errors("sweep snapshot"):
            pipe = self.broker.client.pipeline(transaction=True)
            for name in lists:
                pipe.lrange(name, 0, -1)
            pipe.hvals(self.broker.unacked_hash)
            *queued, unacked = pipe.execute()
        # One message parsed at a time and dropped: holding 10,000 parsed messages at
        # once doubles the sweep's time in garbage-collector passes.
        ids = {i for items in queued for raw in items if (i := _message_id(_loads(raw)))}
        for raw in unacked:  # kombu's entry: [message, exchange, routing_key]
            entry = _loads(raw)
            if isinstance(entry, list) and entry and (i := _message_id(entry[0])):
                ids.add(i)
        return ids

    def sweep_once(self) -> int:
        """One look at every outstanding unit; returns how many were republished."""
        client = self.outstanding.client
        with map_redis_errors("sweep read"):
            records = cast("dict[bytes, bytes]", client.hgetall(self.outstanding.units_key))
            counted = cast("dict[bytes, bytes]", client.hgetall(self.outstanding.misses_key))
        misses = {k.decode(): int(v) for k, v in counted.items()}
        units = Outstanding.parse_units(records)
        if not units:
            if misses:
                with map_redis_errors("sweep cleanup"):
                    client.delete(self.outstanding.misses_key)
            return 0
        present = self._present_ids(u.queue for u in units)
        parked = self.parking.parked_keys()
        verdict = find_orphans(
            units,
            present_task_ids=present,
            parked_keys=parked,
            misses=misses,
            threshold=self.misses,
        )
        back = [u.key for u in units if u.key in misses and u.key not in verdict.misses]
        stale = [k for k in misses if k.encode() not in records]
        self.outstanding.store_misses(verdict, present=[*back, *stale])
        republished = 0
        for unit in verdict.orphans:
            if self.ledger.state(self._downstream(unit), unit.key) is DeliveryState.DELIVERED:
                self.outstanding.settle(unit.key)
                continue
            result = self.app.send_task(
                unit.task, args=unit.args, kwargs=unit.kwargs, queue=unit.queue
            )
            self.outstanding.record(
                OutstandingUnit(
                    unit.key, unit.task, str(result.id), unit.queue, unit.args, unit.kwargs
                )
            )
            republished += 1
            log.warning(
                "orphan_republished",
                key=unit.key,
                task=unit.task,
                queue=unit.queue,
                lost_task_id=unit.task_id,
                task_id=str(result.id),
            )
        return republished

    def _downstream(self, unit: OutstandingUnit) -> str:
        task = self.app.tasks.get(unit.task)
        return str(getattr(task, "downstream", "") or "")
