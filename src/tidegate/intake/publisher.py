"""Where accepted units go: :class:`~tidegate.load.Admission` in production, a list in tests.

The intake asks two things of the publish side, in this order: which of the queues
its units would go to are too loaded to take them (then it answers 503 before
publishing anything), and then to put every unit on the broker. ``publish`` returns
only once the broker has answered for the last unit (the Redis reply on a Redis
broker): that is what lets the CONTRL say "accepted".
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from typing import Protocol

from tidegate.errors import ConfigurationError
from tidegate.intake.batching import (
    DEFAULT_MAX_BATCH_UNITS,
    BatchingCelerySender,
    PublishThread,
    can_batch,
)
from tidegate.integrations.celery.sender import CelerySender
from tidegate.load.admission import Admission, Inbound
from tidegate.load.payload import check_payload_size
from tidegate.load.watermarks import Level

__all__ = ["AdmissionPublisher", "MemoryPublisher", "Publisher"]


class Publisher(Protocol):
    """The publish side of the intake."""

    def saturated(self, units: Sequence[Inbound]) -> frozenset[str]:
        """The queues that hold ``units`` back: above their HWM, for a unit not shed."""

    def drained(self, queues: frozenset[str]) -> frozenset[str]:
        """The ``queues`` at or below their LWM (a paused drop folder may resume)."""

    def publish(self, units: Sequence[Inbound]) -> None:
        """Put every unit on the broker; return once the broker has them all.

        Raises:
            PayloadTooLarge: a unit is too large; checked before any is sent.
            BackendError: the broker failed (some units may be on it: see
                :mod:`tidegate.intake.pipeline` for why that is harmless).
        """


class AdmissionPublisher:
    """Publishes through an :class:`~tidegate.load.Admission`.

    A queue holds its units back when the admission's load state for it is at level
    ``high`` (above the HWM, with the hysteresis of :mod:`tidegate.load.watermarks`,
    so that a queue hovering at the HWM does not flip senders between 202 and 503) —
    unless every unit for it is one the admission will shed: a sheddable document of
    a queue under sustained overload goes to the durable quarantine, which is as
    safe an acceptance as the broker. Units are submitted without blocking: the
    sender waits, not a request thread.

    With ``batching`` (the default), an admission sending with a plain
    :class:`CelerySender` to a broker kombu can batch is given a
    :class:`~tidegate.intake.batching.BatchingCelerySender` on the same app (it sends
    the same messages; inside a batch they share one pipeline) and :meth:`publish`
    hands the units to a :class:`~tidegate.intake.batching.PublishThread`. Otherwise
    (``batching=False``, RabbitMQ, RQ) units are published on the caller's thread.

    Raises:
        ConfigurationError: (from :meth:`saturated`) a unit's queue has no task.
    """

    def __init__(
        self,
        admission: Admission,
        *,
        batching: bool = True,
        max_batch_units: int = DEFAULT_MAX_BATCH_UNITS,
    ) -> None:
        self.admission = admission
        self.thread: PublishThread | None = None
        sender = admission.sender
        if batching and type(sender) is CelerySender and can_batch(sender.app):
            batching_sender = BatchingCelerySender(sender.app)
            admission.sender = batching_sender
            self.thread = PublishThread(
                self._publish_here, batch=batching_sender.batch, max_units=max_batch_units
            )

    def saturated(self, units: Sequence[Inbound]) -> frozenset[str]:
        admission = self.admission
        by_queue: dict[str, list[Inbound]] = {}
        for unit in units:
            by_queue.setdefault(unit.queue, []).append(unit)
        full = set()
        for queue, queued in by_queue.items():
            if queue not in admission.tasks:
                raise ConfigurationError(
                    f"no task for queue {queue!r}; known queues: {sorted(admission.tasks)}"
                )
            state = admission.load(queue)
            if state.level is Level.HIGH and not all(
                admission.policy.decide(u.document_class, state).shed for u in queued
            ):
                full.add(queue)
        return frozenset(full)

    def drained(self, queues: frozenset[str]) -> frozenset[str]:
        # Level LOW is reached only at or below the LWM (and a queue paused at HIGH
        # must pass through it): the watermarks' hysteresis, not a second one here.
        return frozenset(q for q in queues if self.admission.load(q).level is Level.LOW)

    def publish(self, units: Sequence[Inbound]) -> None:
        if self.thread is not None:
            self.thread.publish(units)
        else:
            self._publish_here(units)

    def close(self) -> None:
        """Stop the publishing thread (after what it was handed is published)."""
        if self.thread is not None:
            self.thread.close()

    def _publish_here(self, units: Sequence[Inbound]) -> None:
        # Every size first: a unit refused after others were sent would leave the
        # interchange half-published.
        for unit in units:
            check_payload_size(unit.payload, limit_bytes=self.admission.max_payload_bytes)
        for unit in units:
            self.admission.submit(unit, block=False)


class MemoryPublisher:
    """The test twin: units are appended to :attr:`published`; saturation is set by hand."""

    def __init__(self, *, saturated: Collection[str] = ()) -> None:
        self.full: set[str] = set(saturated)
        self.published: list[Inbound] = []
        self._lock = threading.Lock()

    def saturated(self, units: Sequence[Inbound]) -> frozenset[str]:
        return frozenset(u.queue for u in units if u.queue in self.full)

    def drained(self, queues: frozenset[str]) -> frozenset[str]:
        return frozenset(q for q in queues if q not in self.full)

    def publish(self, units: Sequence[Inbound]) -> None:
        with self._lock:
            self.published.extend(units)
