"""The worker-side drain of RabbitMQ's dead letters: installed only for AMQP, and a
failing look never ends it."""

from __future__ import annotations

import threading

import structlog
from celery import Celery

from tidegate.errors import BackendUnavailable
from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.integrations.celery.amqp_topology import AmqpTopology
from tidegate.integrations.celery.amqp_worker import DrainThread, install_amqp_hooks, topology_of


class _Connection:
    released = False

    def release(self) -> None:
        self.released = True


class _FlakyDrain:
    """Redis down on the first look, fine on the second."""

    batch = 100

    def __init__(self) -> None:
        self.connection = _Connection()
        self.looks = 0
        self.recovered = threading.Event()

    def drain_once(self) -> int:
        self.looks += 1
        if self.looks == 1:
            raise BackendUnavailable("redis down")
        self.recovered.set()
        return 0


def test_hooks_are_installed_for_rabbitmq_only() -> None:
    redis_app = Celery(broker="redis://127.0.0.1:1/0", set_as_current=False)
    amqp_app = Celery(broker="amqp://guest@127.0.0.1:1//", set_as_current=False)

    assert install_amqp_hooks(redis_app) is False
    assert install_amqp_hooks(amqp_app) is True


def test_the_drain_uses_the_topology_the_preset_declared() -> None:
    topology = AmqpTopology(delivery_limit=3, dead_letter_queue="port.dead")
    app = configure(
        Celery(broker="amqp://guest@127.0.0.1:1//", set_as_current=False),
        CeleryPreset(amqp=topology),
    )

    assert topology_of(app) is topology
    assert topology_of(Celery(set_as_current=False)) == AmqpTopology()


def test_a_failed_look_is_logged_and_the_drain_goes_on() -> None:
    drain = _FlakyDrain()
    with structlog.testing.capture_logs() as events:
        thread = DrainThread(drain, interval_s=0.01).start()  # type: ignore[arg-type]
        recovered = drain.recovered.wait(10)
        thread.stop()

    assert recovered
    assert drain.connection.released
    assert [e["event"] for e in events][:1] == ["dead_letter_drain_backend_error"]
