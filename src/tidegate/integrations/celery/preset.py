"""The safe Celery configuration for a fleet behind slow downstreams.

What each setting is for:

- ``worker_prefetch_multiplier=1`` + ``task_acks_late``: a worker process holds one
  message at a time and acknowledges it only when done, so the burst stays in the
  broker (cheap, durable, visible as queue depth) instead of worker RAM.
- ``task_reject_on_worker_lost``: a SIGKILLed or OOM-killed worker's message is
  redelivered, not lost.
- JSON only: no pickle in, no pickle out.
- one queue per downstream (``edi.customs``, ``edi.tos``…), each served by its own
  worker pool, so a customs stall never starves TOS pushes.
- the Redis broker's ``visibility_timeout`` must be comfortably above the hard time
  limit: an unacknowledged message older than it is handed to *another* worker while
  the first still runs it (Celery #5935, #6229). :func:`configure` refuses such a
  setup instead of running every slow task twice.
- on RabbitMQ, task queues are quorum queues with a delivery limit whose overflow is
  dead-lettered, at least once, into a queue tidegate drains into its DLQ (see
  :mod:`~tidegate.integrations.celery.amqp_topology`), and every publish waits for the
  broker's confirm (``confirm_publish``): the parking mover, a replay and admission
  count a unit as handed over only once the broker has it. RabbitMQ redelivers an
  unacknowledged message when its consumer's connection closes, not on a timer, so the
  visibility-timeout check does not apply there.
- on Redis, ``unacked_mutex_expire`` (:data:`UNACKED_MUTEX_EXPIRE_S`): kombu restores
  expired ``unacked`` messages under a Redis lock, and a worker main process SIGKILLed
  while it holds that lock leaves it for kombu's default 300 s, during which no worker
  restores anything. A chaos run saw a killed main's message wait 353 s (visibility
  timeout 60 s). Two restores running at once are harmless (each moves a message in a
  ``WATCH`` transaction), so the lock can be short.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from kombu import Queue

from tidegate.errors import ConfigurationError
from tidegate.integrations.celery.amqp_topology import AmqpTopology, is_amqp_url

__all__ = [
    "DEFAULT_QUEUES",
    "DEFAULT_ROUTES",
    "REDIS_DEFAULT_VISIBILITY_TIMEOUT_S",
    "UNACKED_MUTEX_EXPIRE_S",
    "CeleryPreset",
    "check_visibility_timeout",
    "configure",
    "ensure_queue",
]

#: The queue topology: one queue per downstream, plus the bulk fan-out queues.
DEFAULT_QUEUES: tuple[str, ...] = ("edi.customs", "edi.tos", "bulk.dispatch", "bl.parse")

#: Routes by task name (glob patterns, as Celery's ``task_routes`` accepts them).
DEFAULT_ROUTES: Mapping[str, str] = {
    "edi.customs.*": "edi.customs",
    "edi.tos.*": "edi.tos",
    "bulk.dispatch": "bulk.dispatch",
    "bulk.aggregate": "bulk.dispatch",
    "bulk.parse_bl": "bl.parse",
}

#: kombu's Redis transport default (one hour).
REDIS_DEFAULT_VISIBILITY_TIMEOUT_S = 3600.0

#: Seconds kombu's ``unacked`` restore lock outlives a holder that died (kombu: 300):
#: the longest a killed lock holder delays the restoring of expired messages.
UNACKED_MUTEX_EXPIRE_S = 10.0

#: The visibility timeout must exceed the hard time limit by at least this factor.
VISIBILITY_MARGIN = 2.0


@dataclass(frozen=True, slots=True)
class CeleryPreset:
    """The knobs of :func:`configure`.

    Args:
        soft_time_limit_s: a task gets ``SoftTimeLimitExceeded`` after this long (it is
            then parked and retried, like any transient failure).
        hard_time_limit_s: the worker process is killed after this long; it includes
            any time spent waiting in place for the gate.
        max_tasks_per_child: recycle pool processes to cap slow leaks.
        rate_limits: per-task ``rate_limit`` annotations (e.g. ``{"edi.tos.push":
            "50/s"}``). **Per worker instance**, as in Celery; the fleet-wide limit is
            the gate — use these only as a local safety net.
        queues: queue names to declare.
        routes: task-name pattern → queue.
        amqp: how task queues are declared when the broker is RabbitMQ (quorum queues,
            delivery limit, dead-letter exchange); ignored on Redis.
        unacked_mutex_expire_s: Redis only: kombu's ``unacked_mutex_expire`` (see the
            module), unless the app's ``broker_transport_options`` already set one.
    """

    soft_time_limit_s: float = 240.0
    hard_time_limit_s: float = 300.0
    max_tasks_per_child: int = 1000
    rate_limits: Mapping[str, str] = field(default_factory=dict)
    queues: tuple[str, ...] = DEFAULT_QUEUES
    routes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ROUTES))
    amqp: AmqpTopology = field(default_factory=AmqpTopology)
    unacked_mutex_expire_s: float = UNACKED_MUTEX_EXPIRE_S

    def __post_init__(self) -> None:
        if not 0 < self.soft_time_limit_s < self.hard_time_limit_s:
            raise ConfigurationError(
                "need 0 < soft_time_limit_s < hard_time_limit_s, got "
                f"{self.soft_time_limit_s!r} and {self.hard_time_limit_s!r}"
            )
        if self.max_tasks_per_child < 1:
            raise ConfigurationError(
                f"max_tasks_per_child must be >= 1, got {self.max_tasks_per_child!r}"
            )
        if not self.unacked_mutex_expire_s > 0:
            raise ConfigurationError(
                f"unacked_mutex_expire_s must be > 0, got {self.unacked_mutex_expire_s!r}"
            )
        unknown = set(self.routes.values()) - set(self.queues)
        if unknown:
            raise ConfigurationError(f"routes name undeclared queues: {sorted(unknown)}")


def _is_redis_url(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "unix://", "sentinel://"))


def _visibility_timeout(app: Celery) -> float | None:
    url = str(app.conf.broker_url or "")
    if not _is_redis_url(url):
        return None  # AMQP brokers redeliver on connection loss, not on a timer
    options: dict[str, Any] = dict(app.conf.broker_transport_options or {})
    return float(options.get("visibility_timeout", REDIS_DEFAULT_VISIBILITY_TIMEOUT_S))


def check_visibility_timeout(app: Celery) -> None:
    """Refuse a Redis broker whose visibility timeout a running task could outlive.

    Raises:
        ConfigurationError: the timeout is below ``2 ×`` the hard time limit.
    """
    timeout = _visibility_timeout(app)
    hard = app.conf.task_time_limit
    if timeout is None or hard is None:
        return
    needed = VISIBILITY_MARGIN * float(hard)
    if timeout < needed:
        raise ConfigurationError(
            f"broker visibility_timeout={timeout:g}s is not comfortably above the hard time "
            f"limit {float(hard):g}s: with acks_late on Redis a task still running after "
            f"{timeout:g}s is redelivered and runs twice. Set "
            f"broker_transport_options={{'visibility_timeout': {needed:g}}} or more, "
            "or lower the time limit."
        )


def configure(app: Celery, preset: CeleryPreset | None = None) -> Celery:
    """Apply the safe preset to ``app`` and check it; returns ``app``.

    Raises:
        ConfigurationError: the broker's visibility timeout is too short (see module).
    """
    preset = preset or CeleryPreset()
    if is_amqp_url(str(app.conf.broker_url or "")):
        queues = [preset.amqp.task_queue(name) for name in preset.queues]
        # Merged, not replaced: the operator's own options (heartbeats, SSL) stay.
        options = {**dict(app.conf.broker_transport_options or {}), "confirm_publish": True}
        app.conf.update(
            tidegate_amqp_topology=preset.amqp,
            broker_transport_options=options,
            task_create_missing_queue_type="quorum" if preset.amqp.quorum else "classic",
        )
    else:
        queues = [Queue(name, routing_key=name) for name in preset.queues]
        if _is_redis_url(str(app.conf.broker_url or "")):
            options = dict(app.conf.broker_transport_options or {})
            options.setdefault("unacked_mutex_expire", preset.unacked_mutex_expire_s)
            app.conf.broker_transport_options = options
    app.conf.update(
        worker_prefetch_multiplier=1,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_max_tasks_per_child=preset.max_tasks_per_child,
        task_soft_time_limit=preset.soft_time_limit_s,
        task_time_limit=preset.hard_time_limit_s,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        event_serializer="json",
        task_queues=queues,
        task_default_queue=preset.queues[0],
        task_routes={pattern: {"queue": queue} for pattern, queue in preset.routes.items()},
        task_annotations={name: {"rate_limit": rate} for name, rate in preset.rate_limits.items()},
        broker_connection_retry_on_startup=True,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    check_visibility_timeout(app)
    return app


def ensure_queue(app: Celery, name: str) -> None:
    """Make ``name`` one of ``app``'s queues, declared as the workers declare it.

    A publisher that sends to a queue its own preset does not list — a DLQ replay to
    the queue a letter names — would otherwise have Celery create it with default
    arguments; RabbitMQ refuses that declaration for a quorum queue the workers
    declared with a delivery limit (``406 PRECONDITION_FAILED``). On Redis, and for a
    queue already listed, this does nothing.
    """
    if not is_amqp_url(str(app.conf.broker_url or "")) or name in app.amqp.queues:
        return
    topology = app.conf.get("tidegate_amqp_topology")
    topology = topology if isinstance(topology, AmqpTopology) else AmqpTopology()
    app.amqp.queues.add(topology.task_queue(name))
