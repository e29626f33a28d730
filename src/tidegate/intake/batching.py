"""One publishing thread for all requests, one broker round trip per batch of them.

Why: the intake's requests run on a pool of worker threads, and each used to call
Celery's ``send_task`` itself. From several threads at once that is slow, and slower
the busier the machine: each call checks a producer (and a connection) out of
kombu's pool — a new connection costs some eight round trips (HELLO, CLIENT SETINFO,
PING, the queue's binding...) — then does one round trip per unit, every thread
taking the GIL back after every socket call. On a machine whose CPUs are taken by
other processes, a thread that holds the GIL can be descheduled while the others
wait for it, so the waits add up with the number of threads (the floor endpoint did
118 interchanges/s from one thread, 43/s from eight).

So the broker I/O has one owner. A request hands its units to :class:`PublishThread`
and waits; the thread takes every request waiting at that moment, submits all their
units through the admission inside one kombu publish batch (on a Redis broker, a
non-transactional pipeline: one round trip for the lot, on one connection that stays
open), and only when that batch is flushed — the broker has answered for every unit —
releases each waiting request with its result. The rule "acknowledge only what is
durable" holds per request: a request is released with success only after the flush
that carried its units, and every request of a failed flush is told it failed
(:class:`~tidegate.errors.BackendUnavailable`, answered 503 + ``Retry-After``; units
already on the broker are harmless because their idempotency keys make the resend a
no-op downstream).

Only where kombu can batch (its Redis transport, :func:`can_batch`) is this used by
default: on RabbitMQ each publish waits for its own confirm, and one thread would add
those waits up instead of overlapping them; RQ has no kombu producer. There the
requests publish on their own threads, as before.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tidegate.errors import BackendUnavailable
from tidegate.integrations.celery.sender import CelerySender, broker_errors
from tidegate.load.admission import Inbound
from tidegate.logging import get_logger

__all__ = ["DEFAULT_MAX_BATCH_UNITS", "BatchingCelerySender", "PublishThread", "can_batch"]

log = get_logger("tidegate.intake")

#: Most units flushed in one batch: bounds the pipeline's memory and the time the
#: first request of a batch waits for the last.
DEFAULT_MAX_BATCH_UNITS = 500


def can_batch(app: Any) -> bool:
    """Whether the Celery ``app``'s broker transport takes kombu publish batches.

    Reads the transport's declared support and its own safety check (kombu's Redis
    transport refuses when a timeout could make it replay a write); no I/O.
    """
    with app.connection_for_write() as connection:
        transport = connection.transport
        implements = getattr(getattr(transport, "implements", None), "batch_publish", False)
        return bool(implements) and bool(getattr(transport, "supports_batch_publish", True))


class BatchingCelerySender(CelerySender):
    """A :class:`CelerySender` whose sends can be grouped in a batch.

    Outside :meth:`batch` it sends exactly as its parent does. Inside, every send of
    the thread goes through one producer in kombu's batch mode and reaches the broker
    when the batch ends.
    """

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        self._celery: Any = app
        self._local = threading.local()

    def send(self, queue: str, task: str, payload: Any) -> None:
        producer = getattr(self._local, "producer", None)
        if producer is None:
            super().send(queue, task, payload)
            return
        with broker_errors("publish"):
            self._celery.send_task(
                task, args=[dict(payload)], queue=queue, ignore_result=True, producer=producer
            )

    @contextlib.contextmanager
    def batch(self, max_units: int = DEFAULT_MAX_BATCH_UNITS) -> Iterator[None]:
        """Group this thread's sends; flushed on a clean exit, discarded on an error.

        Raises:
            BackendUnavailable: the broker did not take the batch (a full Redis:
                :class:`~tidegate.errors.BackendUnwritable`).
        """
        with (
            broker_errors("publish batch"),
            self._celery.producer_or_acquire() as producer,
            producer.batch(max_size=max_units),
        ):
            self._local.producer = producer
            try:
                yield
            finally:
                self._local.producer = None


@dataclass
class _Job:
    units: Sequence[Inbound]
    done: Future[None] = field(default_factory=Future)


_STOP = object()


class PublishThread:
    """Publishes the units of concurrent requests in batches, from one thread.

    Args:
        publish_one: puts one request's units on the broker (raises for that request).
        batch: a context grouping the sends made inside it (flushes on exit); a
            ``nullcontext`` when the sender cannot batch.
        max_units: most units per batch (a request's units are never split).
        name: the thread's name.
    """

    def __init__(
        self,
        publish_one: Callable[[Sequence[Inbound]], None],
        *,
        batch: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
        max_units: int = DEFAULT_MAX_BATCH_UNITS,
        name: str = "tidegate-intake-publish",
    ) -> None:
        self._publish_one = publish_one
        self._batch = batch if batch is not None else self.no_batch
        self._max_units = max_units
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._name = name
        self.batches = 0

    @staticmethod
    def no_batch() -> contextlib.AbstractContextManager[object]:
        """The batch of a sender that cannot batch: each send goes out at once."""
        return contextlib.nullcontext()

    def publish(self, units: Sequence[Inbound]) -> None:
        """Hand ``units`` to the thread; return once the broker has them all.

        Raises:
            BackendUnavailable: the batch carrying them was not taken by the broker.
            Exception: what publishing this request's units raised (e.g.
                :class:`~tidegate.errors.PayloadTooLarge`).
        """
        self._ensure_started()
        job = _Job(units)
        self._jobs.put(job)
        job.done.result()

    def close(self) -> None:
        """Stop the thread after the requests already handed over are published."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(_STOP)
            thread.join()

    def _ensure_started(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _take(self, first: _Job) -> tuple[list[_Job], bool]:
        jobs, count = [first], len(first.units)
        while count < self._max_units:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return jobs, True
            jobs.append(item)
            count += len(item.units)
        return jobs, False

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            jobs, stop = self._take(item)
            self._carry(jobs)
            if stop:
                return

    def _carry(self, jobs: list[_Job]) -> None:
        carried: list[_Job] = []
        try:
            with self._batch():
                for job in jobs:
                    try:
                        self._publish_one(job.units)
                    except Exception as exc:  # this request's own failure
                        job.done.set_exception(exc)
                    else:
                        carried.append(job)
        except BaseException as exc:
            # The flush failed (or the batch could not start): none of the requests
            # still waiting may be acknowledged.
            log.warning("intake_batch_failed", requests=len(jobs), error=str(exc)[:200])
            failure = (
                BackendUnavailable(f"the broker did not take the batch: {exc}")
                if isinstance(exc, Exception)
                else exc
            )
            for job in jobs:
                if not job.done.done():
                    job.done.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        self.batches += 1
        for job in carried:
            job.done.set_result(None)
