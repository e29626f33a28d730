"""Worker hooks for a RabbitMQ broker: the dead-letter topology and its drain.

The dead-letter exchange must exist before the first message is dead-lettered: with
at-least-once dead-lettering a quorum queue holds on to a message it cannot route, so
nothing is lost, but nothing reaches the DLQ either. Each worker's main process
declares it at start-up and runs one small thread that drains the dead-letter queue
into tidegate's DLQ (:class:`~tidegate.integrations.celery.amqp_drain.DeadLetterDrain`);
several workers draining at once is safe, since the broker hands each message to one.

On a Redis broker :func:`install_amqp_hooks` installs nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery, signals

from tidegate.errors import BackendError
from tidegate.integrations.celery.amqp_drain import DeadLetterDrain
from tidegate.integrations.celery.amqp_topology import AmqpTopology, is_amqp_url
from tidegate.integrations.celery.runtime import runtime
from tidegate.logging import get_logger

__all__ = ["DEFAULT_DRAIN_INTERVAL_S", "DrainThread", "install_amqp_hooks", "topology_of"]

log = get_logger("tidegate.celery")

#: Seconds between two looks at the dead-letter queue (one ``basic.get`` when empty).
DEFAULT_DRAIN_INTERVAL_S = 1.0

_THREADS: dict[int, DrainThread] = {}


def topology_of(app: Celery) -> AmqpTopology:
    """The topology :func:`~tidegate.integrations.celery.configure` declared for ``app``."""
    topology = app.conf.get("tidegate_amqp_topology")
    return topology if isinstance(topology, AmqpTopology) else AmqpTopology()


class DrainThread:
    """Runs ``drain.drain_once()`` every ``interval_s`` until stopped.

    A broker or Redis error is logged and retried at the next interval: the letter
    stays in the broker meanwhile, so waiting loses nothing.
    """

    def __init__(self, drain: DeadLetterDrain, *, interval_s: float = DEFAULT_DRAIN_INTERVAL_S):
        self.drain = drain
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                moved = self.drain.drain_once()
            except BackendError:
                log.warning("dead_letter_drain_backend_error")
                moved = 0
            except Exception as exc:  # a broker error must not end the thread silently
                log.error("dead_letter_drain_error", error=type(exc).__name__)
                moved = 0
            if moved < self.drain.batch:
                self._stop.wait(self.interval_s)

    def start(self) -> DrainThread:
        self._thread = threading.Thread(target=self._run, name="tidegate-dlx-drain", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.drain.connection.release()


def install_amqp_hooks(app: Celery, *, interval_s: float = DEFAULT_DRAIN_INTERVAL_S) -> bool:
    """Declare the dead-letter topology and drain it from every worker of ``app``.

    Returns whether hooks were installed (``False`` for a non-AMQP broker).
    """
    if not is_amqp_url(str(app.conf.broker_url or "")):
        return False

    def _start(sender: Any = None, **_: Any) -> None:
        if id(app) in _THREADS:
            return
        drain = DeadLetterDrain(
            app.connection_for_write(), runtime(app).dlq, topology=topology_of(app)
        )
        drain.declare()
        _THREADS[id(app)] = DrainThread(drain, interval_s=interval_s).start()
        log.info("dead_letter_drain_started", queue=drain.topology.dead_letter_queue)

    def _stop(sender: Any = None, **_: Any) -> None:
        running = _THREADS.pop(id(app), None)
        if running is not None:
            running.stop()

    signals.worker_ready.connect(_start, weak=False)
    signals.worker_shutdown.connect(_stop, weak=False)
    return True
