"""Publish-side admission: the intake decides, per document, queue it or quarantine it.

Celery's ``apply_async`` never says no: a producer that outruns the fleet grows the
broker without bound (Celery #2874, declined upstream in favour of "broker
features"). :class:`Admission` sits between producers and the broker:

1. it reads the queue's :class:`~tidegate.load.watermarks.LoadState` — from the
   monitor's board when it is fresh (so "shedding" means the same thing on every
   producer), otherwise from its own samples, taken at most once per interval;
2. a sheddable document of a queue under sustained overload goes to the durable
   :class:`~tidegate.load.quarantine.Quarantine` (``Outcome.QUARANTINED``);
3. otherwise — optionally after blocking the producer while the queue is above its
   high watermark, for at most ``max_block_s`` — it is sent (``Outcome.QUEUED``).
   A document is never refused: when the wait expires it is queued anyway, because
   the documents that are not sheddable are exactly the ones that must flow.

The broker side is a :class:`Sender` — the Celery one in
:mod:`tidegate.integrations.celery.sender` (``send_task`` to the class's queue and
task) or the RQ one in :mod:`tidegate.integrations.rq` — so the decision is written
once for both.

Example::

    admission = Admission.for_celery(
        app, {"edi.customs": "edi.customs.submit", "bulk.documents": "bulk.documents.store"},
        client=redis_client, settings=Settings.load(),
    )
    result = admission.submit(Inbound(key, BULK_BL_PDF, envelope))
    result.outcome        # Outcome.QUEUED or Outcome.QUARANTINED
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from tidegate.errors import ConfigurationError, LoadShed
from tidegate.events import QuarantineReplayed, emit
from tidegate.keys import DEFAULT_PREFIX
from tidegate.load.admission_types import Admitted, Inbound, Outcome, ReplayReport, Sender
from tidegate.load.board import LoadBoard
from tidegate.load.depth import DepthProbe, QueueDepth
from tidegate.load.levels import LoadState, Watermarks, advance
from tidegate.load.payload import DEFAULT_MAX_PAYLOAD_BYTES, check_payload_size
from tidegate.load.protocols import LoadBoardStore, QuarantineStore, WatermarkConfigStore
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.shedding import SheddingPolicy
from tidegate.load.watermark_store import WatermarkStore
from tidegate.logging import get_logger
from tidegate.settings import Settings

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_MAX_BLOCK_S",
    "Admission",
    "Admitted",
    "Inbound",
    "Outcome",
    "ReplayReport",
    "Sender",
]

log = get_logger("tidegate.load")

#: Sampling period of an admission that has no fresh board to read, seconds.
DEFAULT_INTERVAL_S = 5.0
#: Longest a producer is blocked on one document while its queue is above HWM.
DEFAULT_MAX_BLOCK_S = 30.0


@dataclass
class _Local:
    """An admission's own view when no fresh board exists."""

    state: LoadState
    sampled_at: float = -math.inf


class Admission:
    """The intake's decision for each document: queue it, or quarantine it.

    Args:
        sender: puts documents on the broker.
        tasks: queue → task name (Celery) or function path (RQ).
        probe: reads queue depths (for blocking, and when no board is fresh).
        quarantine: where shed documents go.
        settings: the process's settings, built once (:meth:`Settings.load`): the
            defaults of ``policy`` and ``watermarks``; the built-in values when omitted.
        policy: which classes may be shed (default ``settings.shedding``).
        watermarks: the live watermarks (default: ``settings.watermarks``, fixed).
        board: the monitor's board; ``None`` = always sample locally.
        interval_s: local sampling period when the board is not fresh.
        block: block the producer while the queue is above HWM (bounded).
        max_block_s: the bound of that wait, per document.
        poll_s: how often a blocked producer re-reads the depth.
        max_payload_bytes: the largest document taken (compact JSON bytes); larger
            ones raise :class:`~tidegate.errors.PayloadTooLarge` before the broker.
        clock / sleep: monotonic time and sleeping (injectable for tests).
    """

    def __init__(
        self,
        sender: Sender,
        tasks: Mapping[str, str],
        *,
        probe: DepthProbe,
        quarantine: QuarantineStore,
        settings: Settings | None = None,
        policy: SheddingPolicy | None = None,
        watermarks: WatermarkConfigStore | None = None,
        board: LoadBoardStore | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        block: bool = False,
        max_block_s: float = DEFAULT_MAX_BLOCK_S,
        poll_s: float = 0.25,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        if not tasks:
            raise ConfigurationError("tasks must map at least one queue to its task")
        for name, value in (("interval_s", interval_s), ("poll_s", poll_s)):
            if not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}")
        if not (math.isfinite(max_block_s) and max_block_s >= 0):
            raise ConfigurationError(f"max_block_s must be a finite number >= 0: {max_block_s!r}")
        if isinstance(max_payload_bytes, bool) or max_payload_bytes < 1:
            raise ConfigurationError(f"max_payload_bytes must be >= 1, got {max_payload_bytes!r}")
        self.sender = sender
        self.tasks = dict(tasks)
        self.probe = probe
        self.quarantine = quarantine
        # Never the environment here: a second read could disagree with the first.
        self.settings = settings if settings is not None else Settings.load({})
        self.policy = policy if policy is not None else self.settings.shedding
        self.watermarks = watermarks
        self.board = board
        self.interval_s = interval_s
        self.block = block
        self.max_block_s = max_block_s
        self.poll_s = poll_s
        self.max_payload_bytes = max_payload_bytes
        self._clock = clock
        self._sleep = sleep
        self._local: dict[str, _Local] = {}
        self._board_cache: tuple[float, dict[str, Any]] = (-math.inf, {})
        self._marks_cache: tuple[float, dict[str, Watermarks]] = (-math.inf, {})
        self._depth_cache: tuple[float, dict[str, QueueDepth]] = (-math.inf, {})

    @classmethod
    def for_celery(
        cls,
        app: Any,
        tasks: Mapping[str, str],
        *,
        client: redis.Redis,
        prefix: str = DEFAULT_PREFIX,
        probe: DepthProbe | None = None,
        settings: Settings | None = None,
        **options: Any,
    ) -> Admission:
        """An admission for a Celery app: its broker's probe, and tidegate's Redis.

        Args:
            app: the producer's Celery app (``send_task`` is used).
            tasks: queue → task name.
            client: tidegate's Redis (quarantine, board, watermarks).
            prefix: tidegate's key prefix (the monitor's and the workers').
            probe: defaults to :func:`~tidegate.integrations.celery.depth.probe_for_app`.
            settings: the process's settings (the watermarks' defaults, the policy).
            options: the other keyword arguments of :class:`Admission`.
        """
        # Imported here: load/ holds the decision, the Celery integration the broker.
        from tidegate.integrations.celery.depth import probe_for_app
        from tidegate.integrations.celery.sender import CelerySender

        settings = settings if settings is not None else Settings.load({})
        marks = WatermarkStore(client, prefix=prefix, defaults=settings.watermarks)
        return cls(
            CelerySender(app),
            tasks,
            probe=probe if probe is not None else probe_for_app(app),
            quarantine=Quarantine(client, prefix=prefix),
            settings=settings,
            watermarks=options.pop("watermarks", marks),
            board=options.pop("board", LoadBoard(client, prefix=prefix)),
            **options,
        )

    # -- load ----------------------------------------------------------------------------

    def _task(self, queue: str) -> str:
        try:
            return self.tasks[queue]
        except KeyError:
            raise ConfigurationError(
                f"no task for queue {queue!r}; known queues: {sorted(self.tasks)}"
            ) from None

    def _marks(self, queue: str) -> Watermarks:
        now = self._clock()
        fetched, cached = self._marks_cache
        if queue not in cached or now - fetched > self.poll_s:
            if self.watermarks is None:
                cached = dict.fromkeys(self.tasks, self.settings.watermarks)
            else:
                cached = self.watermarks.get_many(set(self.tasks) | {queue})
            self._marks_cache = (now, cached)
        return cached.get(queue) or self.settings.watermarks

    def _depths(self, *, max_age_s: float) -> dict[str, QueueDepth]:
        now = self._clock()
        taken, depths = self._depth_cache
        if now - taken >= max_age_s:
            depths = self.probe.sample(list(self.tasks))
            self._depth_cache = (now, depths)
        return depths

    def load(self, queue: str) -> LoadState:
        """The queue's load state: the monitor's when fresh, else this admission's own."""
        if self.board is not None:
            now = self._clock()
            fetched, entries = self._board_cache
            if now - fetched > min(self.poll_s, self.interval_s / 2):
                entries = self.board.read(list(self.tasks))
                self._board_cache = (now, entries)
            entry = entries.get(queue)
            if entry is not None and entry.fresh():
                state: LoadState = entry.state
                return state
        local = self._local.setdefault(queue, _Local(LoadState(queue)))
        now = self._clock()
        if now - local.sampled_at >= self.interval_s:
            depth = self._depths(max_age_s=0.0)[queue].total
            local.state = advance(local.state, depth, self._marks(queue))
            local.sampled_at = now
        return local.state

    # -- decisions -----------------------------------------------------------------------

    def _quarantine(self, document: Inbound, reason: str, depth: int, waited_s: float) -> Admitted:
        record = QuarantinedDocument(
            key=document.key,
            document_class=document.document_class.name,
            queue=document.queue,
            task=self._task(document.queue),
            payload=dict(document.payload),
            reason=reason,
            depth=depth,
            sender=self.sender.name,
        )
        self.quarantine.add(record)
        return Admitted(
            Outcome.QUARANTINED,
            document.key,
            document.document_class.name,
            document.queue,
            reason,
            depth,
            round(waited_s, 3),
        )

    def submit(
        self,
        document: Inbound,
        *,
        block: bool | None = None,
        max_block_s: float | None = None,
        raise_on_shed: bool = False,
    ) -> Admitted:
        """Queue ``document``, or quarantine it if its queue is overloaded and it may wait.

        Args:
            document: the document.
            block: override the admission's ``block`` for this call.
            max_block_s: override the bound of the wait for this call.
            raise_on_shed: raise :class:`~tidegate.errors.LoadShed` when quarantined
                (the document is stored either way).

        Raises:
            PayloadTooLarge: the document is above ``max_payload_bytes``; nothing was
                stored or sent (it is the sender's to split or fix).
            LoadShed: only with ``raise_on_shed``.
            BackendUnavailable: Redis or the broker is unreachable (nothing was sent).
        """
        check_payload_size(document.payload, limit_bytes=self.max_payload_bytes)
        queue = document.queue
        task = self._task(queue)
        cls = document.document_class
        state = self.load(queue)
        decision = self.policy.decide(cls, state)
        if decision.shed:
            result = self._quarantine(document, decision.reason, state.depth, 0.0)
            if raise_on_shed:
                raise LoadShed(cls.name, decision.reason)
            return result
        waited, reason, depth = 0.0, "admitted", state.depth if state.samples else None
        if self.block if block is None else block:
            bound = self.max_block_s if max_block_s is None else max_block_s
            waited, reason, depth, shed = self._wait_below_hwm(document, bound)
            if shed:
                result = self._quarantine(document, "sustained_overload", depth or 0, waited)
                if raise_on_shed:
                    raise LoadShed(cls.name, "sustained_overload")
                return result
        self.sender.send(queue, task, document.payload)
        log.debug("document_queued", key=document.key, document_class=cls.name, queue=queue)
        return Admitted(Outcome.QUEUED, document.key, cls.name, queue, reason, depth, waited)

    def _wait_below_hwm(
        self, document: Inbound, bound_s: float
    ) -> tuple[float, str, int | None, bool]:
        """Block while the queue is above HWM; returns (waited, reason, depth, shed)."""
        queue = document.queue
        start = self._clock()
        depth = self._depths(max_age_s=self.poll_s)[queue].total
        hwm = self._marks(queue).hwm
        if depth <= hwm:
            return 0.0, "admitted", depth, False
        while True:
            waited = self._clock() - start
            if self.policy.decide(document.document_class, self.load(queue)).shed:
                return waited, "sustained_overload", depth, True
            if waited >= bound_s:
                log.warning(
                    "admission_wait_expired",
                    key=document.key,
                    document_class=document.document_class.name,
                    queue=queue,
                    depth=depth,
                    hwm=hwm,
                    waited_s=round(waited, 3),
                )
                return round(waited, 3), "wait_expired", depth, False
            self._sleep(min(self.poll_s, max(0.0, bound_s - waited)))
            depth = self._depths(max_age_s=self.poll_s)[queue].total
            hwm = self._marks(queue).hwm
            if depth <= hwm:
                waited = round(self._clock() - start, 3)
                log.info(
                    "producer_waited",
                    key=document.key,
                    document_class=document.document_class.name,
                    queue=queue,
                    depth=depth,
                    hwm=hwm,
                    waited_s=waited,
                )
                return waited, "admitted_after_wait", depth, False

    def replay(self, queue: str, limit: int, *, force: bool = False) -> ReplayReport:
        """Give up to ``limit`` quarantined documents of ``queue`` back to the intake.

        Each goes through the same decision as a new document: if the queue is under
        sustained overload again, it is put back in line (and the replay stops). With
        ``force``, the shedding check is skipped (an operator's explicit decision).
        """
        batch = self.quarantine.claim_batch(queue, limit)
        report, claimed = ReplayReport(queue, skipped=batch.in_replay), batch.documents
        for index, record in enumerate(claimed):
            cls = self.policy.classes.get(record.document_class)
            overloaded = (
                not force and cls is not None and self.policy.decide(cls, self.load(queue)).shed
            )
            if overloaded or record.sender != self.sender.name:
                if not overloaded:
                    log.warning(
                        "quarantine_replay_wrong_sender",
                        queue=queue,
                        key=record.key,
                        sender=record.sender,
                        expected=self.sender.name,
                    )
                for rest in claimed[index:]:
                    self.quarantine.release(rest)
                report.released = len(claimed) - index
                break
            self.sender.send(record.queue, record.task, record.payload)
            self.quarantine.ack(record)
            report.replayed += 1
            report.by_class[record.document_class] += 1
        if claimed or report.skipped:
            emit(
                QuarantineReplayed(
                    queue,
                    report.replayed,
                    report.released,
                    report.skipped,
                    dict(report.by_class),
                    forced=force,
                )
            )
        return report
