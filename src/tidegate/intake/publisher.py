"""Where accepted units go: :class:`~tidegate.load.Admission` in production, a list in tests.

The intake asks two things of the publish side, in this order: which of the queues
its units would go to are above their high watermark (then it answers 503 before
publishing anything), and then to put every unit on the broker. ``publish`` returns
only once the broker has answered for the last unit (the Redis reply on a Redis
broker): that is what lets the CONTRL say "accepted".
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from typing import Protocol

from tidegate.load.admission import Admission, Inbound
from tidegate.load.payload import check_payload_size
from tidegate.load.watermarks import Level

__all__ = ["AdmissionPublisher", "MemoryPublisher", "Publisher"]


class Publisher(Protocol):
    """The publish side of the intake."""

    def saturated(self, queues: Collection[str]) -> frozenset[str]:
        """The queues among ``queues`` that are above their high watermark."""

    def publish(self, units: Sequence[Inbound]) -> None:
        """Put every unit on the broker; return once the broker has them all.

        Raises:
            PayloadTooLarge: a unit is too large; checked before any is sent.
            BackendError: the broker failed (some units may be on it: see
                :mod:`tidegate.intake.pipeline` for why that is harmless).
        """


class AdmissionPublisher:
    """Publishes through an :class:`~tidegate.load.Admission`.

    A queue is saturated when the admission's load state for it is at level ``high``
    (above the HWM, with the hysteresis of :mod:`tidegate.load.watermarks`, so that a
    queue hovering at the HWM does not flip senders between 202 and 503). Units are
    submitted without blocking: the sender waits, not a request thread. A sheddable
    unit the admission quarantines is durably kept too, so it counts as accepted.
    """

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def saturated(self, queues: Collection[str]) -> frozenset[str]:
        return frozenset(q for q in queues if self.admission.load(q).level is Level.HIGH)

    def publish(self, units: Sequence[Inbound]) -> None:
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

    def saturated(self, queues: Collection[str]) -> frozenset[str]:
        return frozenset(q for q in queues if q in self.full)

    def publish(self, units: Sequence[Inbound]) -> None:
        with self._lock:
            self.published.extend(units)
