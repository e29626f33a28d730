"""Publish tracking: every publish of a unit is recorded for the orphan sweep.

:func:`track_publishes` hooks three moments of a tracked task's message, in whatever
process publishes (the intake, a worker's aggregate, the parking mover):

- ``before_task_publish``: the unit is recorded (:meth:`Outstanding.record`) and its
  sequence ``s0`` and list (*lane*) are put in the message's headers;
- ``after_task_publish``: kombu's LPUSH has returned, the push is confirmed
  (:meth:`Outstanding.pushed`, a new sequence ``s1``);
- a reject with requeue in tidegate's broker channel (:func:`broker.on_requeue`): the
  message was pushed again at the newest end, a new ``s1`` (:meth:`Outstanding.requeued`).

When the app publishes through tidegate's broker channel to the Redis server and
database of the registry (the usual single-Redis deployment), the first two are one
script run in place of kombu's LPUSH (:func:`broker.on_put`,
:mod:`tidegate.integrations.celery.tracked_push`): the same records, in the same order,
one round trip per publish instead of three.

Why two sequences let the sweep work without reading the queues:
:mod:`tidegate.integrations.celery.sweep_index`. A record that cannot be written (Redis down) is
logged and the publish goes on: the sweep only protects what it knows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from celery import Celery, signals

from tidegate.delivery import unit_key
from tidegate.errors import BackendError, ConfigurationError
from tidegate.integrations.celery.broker import TRANSPORT, on_put, on_requeue
from tidegate.integrations.celery.kombu_redis import KombuRedisLayout
from tidegate.integrations.celery.tracked_push import push_tracked, same_redis
from tidegate.load.outstanding import (
    LANE_HEADER,
    SEQ_HEADER,
    Outstanding,
    OutstandingUnit,
)
from tidegate.logging import get_logger, key_hash

__all__ = ["track_publishes"]

log = get_logger("tidegate.celery")

_TRACKERS: dict[tuple[int, str], Callable[[], None]] = {}
_TRACKERS_LOCK = threading.Lock()


class _Tracker:
    """The three hooks of one registry (see the module docstring)."""

    def __init__(self, names: set[str] | None, outstanding: Outstanding, app: Celery | None):
        self._names = names
        self.outstanding = outstanding
        self.app = app
        self._fuses: bool | None = None
        #: This thread's publish in progress: the unit (fused mode) and whether it was pushed.
        self._local = threading.local()

    def tracked(self) -> set[str]:
        if self._names is None:
            from tidegate.integrations.celery.gated import GatedTask

            assert self.app is not None
            self._names = {n for n, t in self.app.tasks.items() if isinstance(t, GatedTask)}
        return self._names

    def unit_of(self, sender: str | None, body: Any) -> str | None:
        if sender is None or sender not in self.tracked():
            return None
        if not isinstance(body, (list, tuple)) or len(body) < 2:
            return None  # not protocol 2: nothing tidegate publishes
        return unit_key(body[0], body[1])  # None: not a unit, not tracked

    def layout(self) -> KombuRedisLayout:
        """kombu's layout, as the app's transport options set it."""
        conf = self.app.conf.broker_transport_options if self.app is not None else None
        return KombuRedisLayout.from_transport_options(conf)

    def on_publish(
        self,
        sender: str | None = None,
        body: Any = None,
        headers: dict[str, Any] | None = None,
        routing_key: str | None = None,
        properties: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> None:
        key = self.unit_of(sender, body)
        if key is None or sender is None or headers is None or not routing_key:
            return
        lane = self.layout().lane_for(routing_key, (properties or {}).get("priority"))
        unit = OutstandingUnit(
            key, sender, str(headers["id"]), routing_key, list(body[0]), body[1], lane
        )
        headers.pop(SEQ_HEADER, None)  # a message without a sequence rather than a stale one
        self._local.pending, self._local.pushed = None, False
        if self.fuses():
            headers[LANE_HEADER] = lane
            self._local.pending = unit  # recorded by on_put, in the push's round trip
            return
        self.record(unit, headers)

    def record(self, unit: OutstandingUnit, headers: dict[str, Any]) -> None:
        """Record ``unit`` on its own round trip, before the push (its ``s0`` in
        ``headers``)."""
        try:
            headers[SEQ_HEADER] = self.outstanding.record(unit)
            headers[LANE_HEADER] = unit.index_lane
        except BackendError as exc:
            log.warning(
                "outstanding_record_failed", key_hash=key_hash(unit.key), error=type(exc).__name__
            )

    def fuses(self) -> bool:
        """Whether this app's publishes go through tidegate's broker channel to the
        Redis server and database of this registry: then record, push and confirm are
        one script (:mod:`tidegate.integrations.celery.tracked_push`)."""
        if self._fuses is None:
            app = self.app
            self._fuses = (
                app is not None
                and app.conf.broker_transport == TRANSPORT
                and same_redis(str(app.conf.broker_url or ""), self.outstanding.client)
            )
        return self._fuses

    def on_put(self, channel: Any, queue: str, message: dict[str, Any], batch: Any) -> bool:
        """tidegate's channel is about to LPUSH ``message``: push the pending unit's
        message with its records in one script. True when it was pushed here."""
        unit: OutstandingUnit | None = getattr(self._local, "pending", None)
        headers = message.get("headers") or {}
        if unit is None or headers.get("id") != unit.task_id or queue != unit.queue:
            return False
        if push_tracked(
            self.outstanding, unit, channel=channel, queue=queue, message=message, batch=batch
        ):
            self._local.pushed = True
            return True
        self._local.pending = None  # pushed by kombu, recorded as without this channel
        self.record(unit, headers)
        return False

    def on_published(
        self,
        sender: str | None = None,
        body: Any = None,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        **_: Any,
    ) -> None:
        key = self.unit_of(sender, body)
        if key is None or headers is None:
            return
        unit: OutstandingUnit | None = getattr(self._local, "pending", None)
        if unit is not None and unit.task_id == headers.get("id"):
            self._local.pending = None
            if not self._local.pushed:
                self.record_late(unit)
            return
        if SEQ_HEADER not in headers:
            return
        lane = str(headers.get(LANE_HEADER) or routing_key)
        try:
            self.outstanding.pushed(key, lane, int(headers[SEQ_HEADER]))
        except BackendError as exc:
            # Left unconfirmed: a later sweep confirms it, an interval late.
            log.warning(
                "outstanding_push_unconfirmed", key_hash=key_hash(key), error=type(exc).__name__
            )

    def record_late(self, unit: OutstandingUnit) -> None:
        """A publish that no tidegate channel pushed (another connection's transport):
        its message carries no ``s0``; the unit is recorded and confirmed after the push,
        so the sweep still knows it."""
        log.warning("outstanding_recorded_late", key_hash=key_hash(unit.key))
        try:
            s0 = self.outstanding.record(unit)
            self.outstanding.pushed(unit.key, unit.index_lane, s0)
        except BackendError as exc:
            log.warning(
                "outstanding_record_failed", key_hash=key_hash(unit.key), error=type(exc).__name__
            )

    def on_requeued(self, message: Any) -> None:
        headers = message.headers or {}
        key = self.unit_of(headers.get("task"), message.payload)
        if key is not None:
            self.outstanding.requeued(key, str(headers.get("id")))


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
    twice for the same registry is harmless.
    """
    if tasks is None and app is None:
        raise ConfigurationError("track_publishes needs task names or an app")
    tracker = _Tracker(None if tasks is None else set(tasks), outstanding, app)
    ident = (id(app) if app is not None else 0, outstanding.units_key)

    def untrack() -> None:
        with _TRACKERS_LOCK:
            stop = _TRACKERS.pop(ident, None)
        if stop is not None:
            stop()

    with _TRACKERS_LOCK:
        if ident in _TRACKERS:
            return untrack
        unhook = on_requeue(tracker.on_requeued)
        unput = on_put(tracker.on_put)

        def stop() -> None:
            signals.before_task_publish.disconnect(tracker.on_publish)
            signals.after_task_publish.disconnect(tracker.on_published)
            unhook()
            unput()

        _TRACKERS[ident] = stop
    signals.before_task_publish.connect(tracker.on_publish, weak=False)
    signals.after_task_publish.connect(tracker.on_published, weak=False)
    return untrack
