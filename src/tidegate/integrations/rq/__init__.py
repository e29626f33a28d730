"""RQ integration: the same unit lifecycle, gate, admission and DLQ as Celery.

RQ has no rate limit (rq #74, #725) and its ``FailedJobRegistry`` is a de-facto DLQ
without reasons. tidegate runs an RQ job through the same lifecycle as a Celery task
(:mod:`tidegate.delivery`), with RQ as a thin engine:

- :func:`gated` — a decorator: malformed-unit check, delivery ledger and
  reconcile-by-lookup, the downstream's fleet-wide gate; a long wait or a transient
  failure re-schedules the job with RQ's scheduler (durable in Redis, not in worker
  memory); an unrecoverable answer dead-letters it with the reason, as a letter
  ``tidegate dlq replay`` can enqueue back (``engine: rq``);
- :func:`dead_letter_handler` / :func:`dead_letter_on_failure` — a worker exception
  handler / a job failure callback: a job that failed for good (no RQ retry left)
  becomes a :class:`~tidegate.load.DeadLetter` with the reason; a job RQ found
  abandoned by a dead worker is run again as a redelivery (reconciled first);
- :func:`rq_admission` — the publish-side :class:`~tidegate.load.admission.Admission`
  with ``queue.count`` (+ started jobs) as depth and ``queue.enqueue`` as sender;
- :class:`JsonWorker` / :func:`json_queue` — JSON only, both ways: RQ pickles jobs by
  default and its workers unpickle whatever is queued; tidegate's queues write JSON
  and its worker refuses (dead-letters, never runs) a job that is not JSON;
- :class:`InProcessJsonWorker` — the same without a work horse forked per job (RQ's
  ``SimpleWorker`` semantics, a heartbeat kept while the job runs): several times the
  jobs per second; a crash mid-job is a whole-worker kill, recovered by RQ's
  abandoned-job path (:mod:`tidegate.integrations.rq.inprocess`).

Both run RQ's recovery of a dead worker's jobs on time
(:mod:`tidegate.integrations.rq.maintenance`).

Run a fixed, small pool per downstream queue (the gate, not the worker count, sets
the pace; ``worker-pool`` runs the scheduler that parked jobs need)::

    export TIDEGATE_REDIS_URL=redis://redis:6379/0 TIDEGATE_PREFIX=tidegate
    rq worker-pool edi.customs --num-workers 2 --url "$TIDEGATE_REDIS_URL" \\
        --worker-class tidegate.integrations.rq.JsonWorker \\
        --exception-handler tidegate.integrations.rq.dead_letter_handler

Enqueue with ``json_queue(name, connection)`` (or RQ's ``serializer="json"``: the same
bytes).

Configuration comes from the environment like the Celery workers:
``TIDEGATE_REDIS_URL`` (else the job's own RQ connection), ``TIDEGATE_PREFIX``, the
gate defaults ``TIDEGATE_<NAME>_RATE`` / ``_BURST`` / ``_CONCURRENCY``, the lookup's
``TIDEGATE_<NAME>_URL`` and ``TIDEGATE_<NAME>_MAX_REQUEST_S``.
"""

from __future__ import annotations

from tidegate.integrations.rq._runtime import downstream_client
from tidegate.integrations.rq._serializer import ContentRefused, JsonSerializer, json_queue
from tidegate.integrations.rq.dlq import dead_letter_handler, dead_letter_on_failure
from tidegate.integrations.rq.gated import ATTEMPT_META, REDELIVERED_META, REPLAY_META, gate, gated
from tidegate.integrations.rq.inprocess import InProcessJsonWorker
from tidegate.integrations.rq.intake import RqDepthProbe, RqSender, rq_admission
from tidegate.integrations.rq.worker import JsonWorker

__all__ = [
    "ATTEMPT_META",
    "REDELIVERED_META",
    "REPLAY_META",
    "ContentRefused",
    "InProcessJsonWorker",
    "JsonSerializer",
    "JsonWorker",
    "RqDepthProbe",
    "RqSender",
    "dead_letter_handler",
    "dead_letter_on_failure",
    "downstream_client",
    "gate",
    "gated",
    "json_queue",
    "rq_admission",
]
