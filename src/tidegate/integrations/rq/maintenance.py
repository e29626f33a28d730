"""RQ's recovery of a dead worker's jobs, run when it is due, not minutes later.

RQ gives back a dead worker's job only in a worker's *maintenance* pass (the
``StartedJobRegistry`` cleanup finds an abandoned execution, the intermediate-queue
cleanup finds a popped job nobody started). Two things in RQ 3.0 let that pass slip
far past ``--maintenance-interval``, and with it every such job:

- an idle worker blocks in ``BLMOVE`` for ``worker_ttl - 15`` s (405 s by default)
  and runs maintenance only between two pops, so on a fleet that has drained its
  queue a dead worker's last job waits up to seven minutes more;
- a maintenance pass holds a per-queue lock that RQ sets for 899 s. A worker killed
  *during* the pass leaves it behind, and no worker cleans that queue for 15 minutes.

:class:`PromptMaintenance` bounds both: the blocking pop returns at least every
maintenance interval, and the lock lives :data:`MAINTENANCE_LOCK_S` — a constant, not
the interval, because the worker that dies holding it may run a long interval (RQ's
default is 10 minutes). A pass that outlives its lock can overlap the next one; that
costs at most a job run twice, which the lifecycle reconciles (ledger, lookup), never
a lost one.
"""

from __future__ import annotations

from typing import Any

from rq import worker_registration
from rq.registry import clean_registries
from rq.utils import now

__all__ = ["MAINTENANCE_LOCK_S", "PromptMaintenance"]

#: How long a maintenance pass may hold its queue's lock, seconds (RQ: 899). Long
#: enough for a pass over a long registry; a dead holder delays recovery by at most it.
MAINTENANCE_LOCK_S = 60


class PromptMaintenance:
    """Mixin for an RQ worker class (before RQ's in the bases): maintenance on time.

    Reads the worker's ``worker_ttl``, ``maintenance_interval``, ``queues``,
    ``connection`` and exception handlers, as RQ's ``BaseWorker`` defines them.
    """

    worker_ttl: int
    maintenance_interval: int
    queues: list[Any]
    _exc_handlers: list[Any]
    last_cleaned_at: Any

    @property
    def dequeue_timeout(self) -> int:
        """RQ's blocking-pop timeout, cut to the maintenance interval."""
        return max(1, min(self.worker_ttl - 15, int(self.maintenance_interval)))

    def clean_registries(self) -> None:
        """RQ's ``Worker.clean_registries`` with a lock of :data:`MAINTENANCE_LOCK_S`."""
        for queue in self.queues:
            lock = queue.registry_cleaning_key
            if not queue.connection.set(lock, 1, nx=True, ex=MAINTENANCE_LOCK_S):
                continue
            clean_registries(queue, self._exc_handlers)
            worker_registration.clean_worker_registry(queue)
            queue.intermediate_queue.cleanup(self, queue)
            queue.release_maintenance_lock()
        self.last_cleaned_at = now()
