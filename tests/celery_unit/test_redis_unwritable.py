"""Redis unavailable for writes (OOM under ``noeviction``, READONLY after a failover).

A real ``redis-server`` with a small ``maxmemory`` is filled until it refuses writes;
each test frees it again. The errors must arrive typed (``BackendUnwritable``, a
``BackendUnavailable``), a gated task must be requeued (never dead-lettered), and the
broker's QoS must keep every message it could not write about.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection
from kombu.message import Message
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from tidegate._redis import client_from_url, map_redis_errors
from tidegate.errors import BackendUnavailable, BackendUnwritable
from tidegate.flow import Gate
from tidegate.integrations.celery import GatedTask, setup
from tidegate.integrations.celery.broker import TRANSPORT, Transport, WriteTolerantQoS
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.discards import DiscardGuard
from tidegate.integrations.celery.runtime import runtime
from tidegate.load import DeadLetter, DeadLetterQueue, ParkingLot
from tidegate.ops.metrics import registry_for
from tidegate.ops.monitor import Monitor
from tidegate.redis_server import EmbeddedRedis
from tidegate.sim import TosSim

pytestmark = pytest.mark.redis

ENVELOPE = {"key": "CODECO-OOM-1", "type": "CODECO", "class": "terminal", "body": "UNH+1'"}
#: Filler value sizes, large to tiny, bytes.
_FILL_SIZES = (65536, 4096, 256, 16)


class Small:
    """A Redis with 4 MiB of memory that a test can fill and free."""

    def __init__(self, server: EmbeddedRedis) -> None:
        self.server = server
        self.url = server.url
        self.client = client_from_url(server.url)
        self._filled = 0
        self._maxmemory = int(self.client.config_get("maxmemory")["maxmemory"])

    def fill(self) -> None:
        """Write filler until Redis answers OOM even to a tiny write, and keep it so.

        A big write refused is not enough: its own query buffer counted towards the
        limit, and once it is freed a small write fits again. Nor is a refused tiny
        write enough: a moment later a write fitted again (a gated task ran to
        "delivered" under two pytest workers; most likely Redis had shrunk a client's
        buffers meanwhile). So the limit then goes to half of what the filler uses:
        every write is refused until :meth:`free`.
        """
        for size in _FILL_SIZES:
            while True:
                try:
                    self.client.set(f"filler:{self._filled}", b"f" * size)
                except redis.exceptions.OutOfMemoryError:
                    break
                self._filled += 1
        used = int(self.client.info("memory")["used_memory"])
        self.client.config_set("maxmemory", max(1, used // 2))

    def free(self) -> None:
        self.client.config_set("maxmemory", self._maxmemory)
        keys = [f"filler:{i}" for i in range(self._filled)]
        if keys:
            self.client.delete(*keys)
        self._filled = 0


@pytest.fixture(scope="module")
def small_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(maxmemory=4 * 2**20) as server:
        yield server


@pytest.fixture
def small(small_server: EmbeddedRedis) -> Iterator[Small]:
    handle = Small(small_server)
    handle.client.flushall()
    try:
        yield handle
    finally:
        handle.free()
        handle.client.flushall()
        handle.client.close()


def test_an_oom_reply_is_unavailable_for_writes(small: Small) -> None:
    """A plain write and a transaction (the DLQ's) both surface as BackendUnwritable."""
    small.fill()
    with pytest.raises(BackendUnwritable) as plain, map_redis_errors("probe"):
        small.client.set("one-more", b"x" * 1024)
    dlq = DeadLetterQueue(small.client, prefix="oom")
    with pytest.raises(BackendUnwritable) as transaction:
        dlq.add(DeadLetter(key="k", task="t", reason="r"))

    for caught in (plain.value, transaction.value):
        assert isinstance(caught, BackendUnavailable)
        assert caught.cause == "oom"
        assert "unavailable for writes" in str(caught)


def test_the_gate_on_a_full_redis_fails_closed_as_unwritable(small: Small) -> None:
    """The gate's Lua acquire under OOM: typed, not a generic BackendError."""
    small.fill()
    gate = Gate(small.client, "tos", prefix="oom")
    with pytest.raises(BackendUnwritable), gate.slot(max_wait=0.1):
        pytest.fail("admitted on a Redis that refuses writes")


def test_a_read_only_replica_is_unavailable_for_writes(small: Small) -> None:
    """After a failover the old address answers READONLY, to commands and to scripts."""
    with EmbeddedRedis() as primary:
        small.client.replicaof("127.0.0.1", primary.port)
        try:
            with pytest.raises(BackendUnwritable) as plain, map_redis_errors("probe"):
                small.client.set("x", 1)
            gate = Gate(small.client, "tos", prefix="ro")
            with pytest.raises(BackendUnwritable) as script, gate.slot(max_wait=0.1):
                pytest.fail("admitted on a read-only replica")
        finally:
            small.client.replicaof("NO", "ONE")
    assert plain.value.cause == script.value.cause == "readonly"


@pytest.fixture
def gated_app(small: Small, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Celery, TosSim]]:
    with TosSim(max_connections=2, service_s=0.0) as tos:
        monkeypatch.setenv("TIDEGATE_TOS_URL", tos.url)
        app = Celery("oom-unit", broker=small.url, set_as_current=False)
        app.conf.tidegate_redis_url = small.url
        app.conf.tidegate_prefix = "oomapp"
        setup(app, mover=False)
        yield app, tos
        rt = runtime(app)
        for client in rt._clients.values():
            client.close()
        rt.client.close()


def test_a_gated_task_on_a_full_redis_is_requeued_not_dead_lettered(
    small: Small, gated_app: tuple[Celery, TosSim]
) -> None:
    """The real GatedTask, in-process: OOM before the call is "wait", never a dead letter
    (it was dead-lettered as ``unexpected error (BackendError)``)."""
    app, tos = gated_app
    calls: list[str] = []

    @app.task(base=GatedTask, name="oom.push", downstream="tos", required_fields=("key",))
    def push(envelope: dict[str, Any]) -> dict[str, Any]:
        calls.append(envelope["key"])
        return {"tidegate": "delivered"}

    small.fill()
    result = push.apply(args=[ENVELOPE])
    small.free()

    assert type(result.result).__name__ == "Reject"
    assert result.result.requeue is True
    assert calls == []
    assert tos.stats(timeline=False)["requests"] == 0
    assert len(DeadLetterQueue(small.client, prefix="oomapp")) == 0
    assert ParkingLot(small.client, prefix="oomapp").depth() == 0


def _consumer(conn: Connection, queue: str) -> Any:
    """A prefetch-1 consumer, declared while Redis takes writes (declaring writes)."""
    simple = conn.SimpleQueue(queue)
    simple.consumer.qos(prefetch_count=1)
    return simple


def _qos(simple: Any) -> WriteTolerantQoS:
    qos = simple.consumer.channel.qos
    assert isinstance(qos, WriteTolerantQoS)
    return qos


def test_a_message_popped_on_a_full_redis_is_kept_and_requeued_later(small: Small) -> None:
    """BRPOP works under OOM, the unacked record does not: the message stays in the
    worker (holding its prefetch slot, so no more are taken), and a requeue asked
    meanwhile reaches the queue once Redis takes writes again. With kombu's QoS the
    record's OOM is raised into the consumer (Celery: "Unrecoverable error")."""
    with Connection(small.url, transport=Transport) as conn:
        simple = _consumer(conn, "oom.q")
        simple.put({"unit": 1})
        simple.put({"unit": 2})
        small.fill()
        message, qos = simple.get(timeout=5), _qos(simple)
        assert message.payload == {"unit": 1}
        assert qos.pending == 1
        assert not qos.can_consume()

        message.requeue()
        assert small.client.llen("oom.q") == 1  # only unit 2: unit 1 is owed, in memory

        small.free()
        qos.flush_pending(force=True)
        assert qos.pending == 0
        assert qos.can_consume()
        assert small.client.llen("oom.q") == 2
        assert small.client.hlen("unacked") == 0


def test_an_ack_refused_by_a_full_redis_is_written_later(small: Small) -> None:
    """A message recorded before the OOM and acked during it stays in ``unacked``
    (recoverable, never lost) until the ack can be written."""
    with Connection(small.url, transport=Transport) as conn:
        simple = _consumer(conn, "oom.a")
        simple.put({"unit": 1})
        message, qos = simple.get(timeout=5), _qos(simple)
        assert small.client.hlen("unacked") == 1
        small.fill()

        message.ack()
        assert qos.pending == 1
        assert small.client.hlen("unacked") == 1

        small.free()
        qos.flush_pending(force=True)
        assert qos.pending == 0
        assert small.client.hlen("unacked") == 0
        assert small.client.llen("oom.a") == 0


def test_the_monitor_says_redis_is_unavailable_for_writes(small: Small) -> None:
    """A tick on a full Redis is reported with its cause, and the recovery too."""
    monitor = Monitor(
        small.client,
        RedisDepthProbe(small.client),
        {"edi.tos": None},
        prefix="oommon",
        interval_s=1.0,
    )
    small.fill()
    with capture_logs() as full:
        monitor.run(iterations=1)
    assert monitor.unwritable == "oom"
    small.free()
    with capture_logs() as freed:
        monitor.run(iterations=1)

    (event,) = [e for e in full if e["event"] == "redis_unavailable_for_writes"]
    assert event["cause"] == "oom"
    assert event["log_level"] == "error"
    assert monitor.unwritable is None
    assert [e["cause"] for e in freed if e["event"] == "redis_writable_again"] == ["oom"]


def test_metrics_expose_redis_unavailable_for_writes(small: Small) -> None:
    """The scrape still answers on a full Redis (it reads) and says writes are refused."""
    registry = registry_for(small.client, prefix="oommet")
    small.fill()
    full = generate_latest(registry).decode()
    small.free()
    freed = generate_latest(registry).decode()

    assert "tidegate_redis_writable 0.0" in full
    assert 'tidegate_redis_unwritable_info{cause="oom"} 1.0' in full
    assert "tidegate_redis_writable 1.0" in freed
    assert "tidegate_redis_unwritable_info{" not in freed


@pytest.mark.parametrize(
    ("broker", "use_ssl", "transport"),
    [
        ("redis://127.0.0.1:1/0", None, TRANSPORT),
        ("rediss://127.0.0.1:1/0", {"ssl_cert_reqs": "required"}, TRANSPORT),
        ("rediss://127.0.0.1:1/0", None, None),  # kombu's TLS default needs its own name
        ("amqp://guest@127.0.0.1:1//", None, None),
    ],
)
def test_setup_chooses_the_write_tolerant_transport_for_redis_only(
    broker: str, use_ssl: dict[str, str] | None, transport: str | None
) -> None:
    """The QoS is installed where it applies; channel errors are retried everywhere."""
    app = Celery("t", broker=broker, set_as_current=False)
    app.conf.broker_use_ssl = use_ssl
    setup(app, mover=False)
    assert app.conf.broker_transport == transport
    assert app.conf.broker_channel_error_retry is True


def test_setup_keeps_an_explicit_transport() -> None:
    app = Celery("t", broker="redis://127.0.0.1:1/0", set_as_current=False)
    app.conf.broker_transport = "redis"
    setup(app, mover=False)
    assert app.conf.broker_transport == "redis"


class _RecordingMessage(Message):
    """A kombu message that records how the consumer let go of it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.released: list[bool] = []

    def reject_log_error(self, logger: Any, errors: Any, requeue: bool = False) -> None:
        self.released.append(requeue)


def test_a_discard_that_cannot_be_dead_lettered_goes_back_to_the_queue(small: Small) -> None:
    """An unregistered task while Redis refuses writes: no record can be written, so the
    message is requeued (to be dead-lettered later), never dropped."""
    app = Celery("discard-oom", broker=small.url, set_as_current=False)
    app.conf.tidegate_redis_url = small.url
    app.conf.tidegate_prefix = "discardoom"
    consumer = SimpleNamespace(app=app, connection_errors=())
    DiscardGuard(consumer)
    message = _RecordingMessage(
        body=b'[[{"key": "typo-under-oom"}], {}, {}]',
        content_type="application/json",
        content_encoding="utf-8",
        headers={"task": "edi.tos.pushh", "id": "t-oom"},
        delivery_info={"routing_key": "edi.tos", "exchange": ""},
    )
    small.fill()
    with capture_logs() as logs:
        consumer.on_unknown_task(None, message, KeyError("edi.tos.pushh"))
    small.free()

    assert message.released == [True]
    assert [e["reason"] for e in logs if e["event"] == "discarded_message_requeued"] == [
        "unregistered task"
    ]
    assert len(DeadLetterQueue(small.client, prefix="discardoom")) == 0
    runtime(app).client.close()


@pytest.mark.parametrize("batched", [False, True], ids=["one_by_one", "batch"])
def test_a_publish_to_a_full_broker_is_unavailable_for_writes(small: Small, batched: bool) -> None:
    """The intake publishes through these senders; kombu wraps the OOM reply in its own
    OperationalError, which escaped the intake as a 500 and a traceback (the demo's
    too-small-Redis run printed one under CPU load). It must be the admission's
    BackendUnwritable, so the intake answers 503 with Retry-After, and nothing is
    queued."""
    from tidegate.intake.batching import BatchingCelerySender
    from tidegate.integrations.celery.sender import CelerySender

    app = Celery("tidegate-full-broker", broker=small.url)

    def publish() -> None:
        if batched:
            sender = BatchingCelerySender(app)
            with sender.batch():
                sender.send("edi.tos", "vessel.tos", {"key": "k"})
        else:
            CelerySender(app).send("edi.tos", "vessel.tos", {"key": "k"})

    try:
        small.fill()
        with pytest.raises(BackendUnwritable) as caught:
            publish()
    finally:
        app.close()

    assert caught.value.cause == "oom"
    assert small.client.llen("edi.tos") == 0
