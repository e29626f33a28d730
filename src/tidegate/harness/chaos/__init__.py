"""Fault scenarios (issue 7): break one thing during a vessel burst, then account for it.

The rule of this package: **one module per fault kind**, holding the fault (what it
breaks, when, and what it must see afterwards) and nothing else. What every kind shares
has a module of its own: :mod:`~tidegate.harness.chaos.config` (the run's configuration,
which *contains* the vessel scenario's :class:`~tidegate.harness.scenarios.vessel.VesselConfig`
rather than copying its fields, and the presets), :mod:`~tidegate.harness.chaos.scenario`
(the common part of every fault: bookkeeping and the invariant),
:mod:`~tidegate.harness.chaos.verdict` (checks and the worker-log readings they use),
:mod:`~tidegate.harness.chaos.runner` (the run around the vessel burst, and its report)
and :mod:`~tidegate.harness.chaos.worker_app` (the workers' Celery app).

Each scenario is the vessel burst of :mod:`tidegate.harness.scenarios.vessel` — real Celery
workers, the gates, simulated customs and TOS — with one fault injected while it
drains, on its own embedded Redis (a chaos run kills things; it never touches a shared
server):

``kill-workers``
    SIGKILL a random worker process every few seconds: pool children (Celery replaces
    them; ``reject_on_worker_lost`` requeues their message at once) and, every Nth
    kill, a worker *main* process, which the harness restarts. A main's prefetched
    message sits in kombu's ``unacked`` hash until the visibility timeout: the
    scenario's workers run with a short one (see :class:`WorkerTiming`).
``redis-restart``
    SIGKILL Redis (AOF ``everysec``, the production setting) mid-burst, keep it down,
    start it again on the same port and directory. The gate fails closed meanwhile.
    The customs gate is paused across the outage, so customs documents are parked in
    Redis when it dies; the movers must bring them back and the gate pace them.
``host-crash``
    ``redis-restart`` as a host crash: Redis is SIGKILLed and its append-only file is
    cut back to its size ``aof_lost_s`` (1 s) before — what ``appendfsync everysec``
    loses with the machine; killing the process alone loses nothing. Delivered marks
    and the broker's pops of the messages they settled are gone: the ledger must not
    be believed (a restart puts it in doubt, and a redelivery asks the downstream).
``downstream-outage``
    The customs gateway answers 503, then refuses connections, for ``fault_s``.
``slow-downstream``
    The TOS gets ``slow_factor`` × slower for ``fault_s``, with more TOS worker
    processes than TOS connections: the concurrency leases must hold the cap.
``slow-commit``
    The TOS records a document only when the request finishes, and from ``fault_at_s``
    a few of its requests (``stragglers``, one in five) take 4 s longer than the
    workers' soft time limit while the rest go through: the task gives up, the TOS
    still commits. The workers know the TOS's ``max_request_s``
    (``TIDEGATE_TOS_MAX_REQUEST_S``): no lookup, no resend before it.
``broker-restart``
    RabbitMQ as the broker (a private node), SIGKILLed mid-burst and booted again
    (:mod:`tidegate.harness.chaos.amqp`; ``--broker amqp://…`` runs ``kill-workers`` and
    ``downstream-outage`` on RabbitMQ too).
``redis-oom``
    Redis refuses every write (``OOM``: ``maxmemory`` with ``noeviction``) for
    ``fault_s`` mid-burst, then takes writes again (:mod:`tidegate.harness.chaos.redis_oom`):
    the workers must wait and resume, losing, repeating and dead-lettering nothing.
``poison``
    Malformed documents (truncated, not EDIFACT, broken references, an envelope
    without a body) are mixed into the burst, plus oversized ones that the intake must
    refuse before the broker.

After every scenario the same invariant is checked: every submitted document is
delivered, dead-lettered, quarantined or refused at intake — or reported pending —
and the downstreams accepted each idempotency key once. A fault that strikes between a
downstream's acceptance and the delivery-ledger mark (a SIGKILL, Redis dying) leaves
the ledger at ``sending``: the redelivered message asks the downstream
(``delivery_reconciled`` events) instead of calling again. Any repeat that still
happens is counted, and ``kill-workers`` / ``redis-restart`` report whether it lies in
such a window. Scenario checks come on top (:func:`run_chaos` returns them in
``report["chaos"]["checks"]``).

The workers run the vessel app (:mod:`tidegate.harness.vessel_app`) through
``tidegate.harness.chaos.worker_app:worker_app``, which only shortens its time limits and
the broker's visibility timeout (``TIDEGATE_CHAOS_*``): the vessel app's own time limits are the
preset's (300 s hard), and its import-time check rightly refuses a visibility timeout
under 600 s. Everything else — tasks, gates, parking, DLQ, ledger — is the vessel app's.
"""

from __future__ import annotations

from tidegate.harness.chaos.config import (
    KINDS,
    WORKER_APP,
    ChaosConfig,
    WorkerTiming,
    benchmark_runs,
    preset,
)
from tidegate.harness.chaos.horizon import HorizonStats, horizon_shorter_than, retry_horizon
from tidegate.harness.chaos.poison import POISON_KINDS, edifact_problem, poison_documents
from tidegate.harness.chaos.runner import run_chaos, summary_row
from tidegate.harness.chaos.verdict import Check, unplanned_dead_letters
from tidegate.harness.report_view import public

__all__ = [
    "KINDS",
    "POISON_KINDS",
    "WORKER_APP",
    "ChaosConfig",
    "Check",
    "HorizonStats",
    "WorkerTiming",
    "benchmark_runs",
    "edifact_problem",
    "horizon_shorter_than",
    "poison_documents",
    "preset",
    "public",
    "retry_horizon",
    "run_chaos",
    "summary_row",
    "unplanned_dead_letters",
]
