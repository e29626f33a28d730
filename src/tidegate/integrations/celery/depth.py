"""Queue depth probes for a Celery broker: how much work each queue really holds.

The autoscaler, the watermarks and the shedding policy all start from one number per
queue (:class:`tidegate.load.depth.QueueDepth`), so it has to be the right one.
``LLEN queue`` is not (KEDA's Redis-lists scaler, celery-exporter #272): kombu's Redis
transport spreads one queue over several lists, and messages a worker has reserved but
not acknowledged are in none of them.

Redis: :class:`RedisDepthProbe` reads kombu's layout
(:mod:`tidegate.integrations.celery.kombu_redis`): every priority sub-queue's length,
and the ``unacked`` hash, each entry mapped to its queue — the default exchange ``""``
routes by queue name (what Celery's ``send_task(queue=...)`` publishes), a named
exchange through its binding set (an exact routing key match, else the bindings with an
empty routing key, as a fanout). It honours ``priority_steps``, ``sep``,
``global_keyprefix`` and ``unacked_key``.

RabbitMQ: a passive ``queue.declare`` through kombu returns the ready messages and
the consumer count, exactly and at once. AMQP does not report unacknowledged messages
(delivered to a worker, running or prefetched), so the probe reads them from the
management API (``GET /api/queues/<vhost>/<queue>``, the ``rabbitmq_management``
plugin; its figures are refreshed every ``collect_statistics_interval``, 5 s by
default). The API's URL is the broker's host on port 15672 with the broker's
credentials unless ``management_url`` says otherwise. Without the plugin, ``unacked``
is 0 and the probe says so once (``amqp_unacked_unavailable``) rather than pretending.

Both probes implement :class:`tidegate.load.depth.DepthProbe`; :func:`probe_for_app`
picks one from a Celery app's broker URL. Neither writes anything.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

import httpx
import redis

from tidegate._redis import client_from_url, map_redis_errors, redact_url
from tidegate.errors import BackendUnavailable, ConfigurationError
from tidegate.integrations.celery.kombu_redis import (
    KOMBU_PRIORITY_STEPS,
    KOMBU_SEP,
    KombuRedisLayout,
)
from tidegate.load.depth import DepthProbe, QueueDepth, check_queues
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from celery import Celery
    from kombu import Connection

__all__ = [
    "RABBITMQ_MANAGEMENT_PORT",
    "AmqpDepthProbe",
    "RedisDepthProbe",
    "management_url_for",
    "probe_for_app",
    "probe_from_url",
]

log = get_logger("tidegate.load")

#: Where the RabbitMQ management API listens unless told otherwise.
RABBITMQ_MANAGEMENT_PORT = 15672
#: A management API that does not answer within this is treated as absent for the sample.
_MANAGEMENT_TIMEOUT_S = 2.0

_REDIS_SCHEMES = ("redis", "rediss", "unix")
_AMQP_SCHEMES = ("amqp", "amqps", "pyamqp", "librabbitmq")
#: Entries read per HSCAN round trip of the unacked hash.
_SCAN_COUNT = 500


class RedisDepthProbe:
    """Depth of Celery/kombu queues on a Redis broker (see the module docstring).

    Args:
        client: a client to the *broker's* Redis database.
        priority_steps: kombu's ``priority_steps`` transport option.
        sep: kombu's separator between queue name and priority step.
        global_keyprefix: kombu's ``global_keyprefix`` transport option.
        unacked_key: kombu's ``unacked_key`` transport option.

    Example::

        probe = RedisDepthProbe(redis.Redis.from_url(BROKER_URL))
        probe.sample(["edi.customs"])["edi.customs"].total
    """

    broker = "redis"

    def __init__(
        self,
        client: redis.Redis,
        *,
        priority_steps: Sequence[int] = KOMBU_PRIORITY_STEPS,
        sep: str = KOMBU_SEP,
        global_keyprefix: str = "",
        unacked_key: str = "unacked",
    ) -> None:
        self.client = client
        self.layout = KombuRedisLayout(tuple(priority_steps), sep, global_keyprefix, unacked_key)

    @classmethod
    def from_url(
        cls, url: str, *, transport_options: Mapping[str, Any] | None = None
    ) -> RedisDepthProbe:
        """A probe for the broker at ``url``, honouring kombu's transport options."""
        layout = KombuRedisLayout.from_transport_options(transport_options)
        return cls(
            client_from_url(url),
            priority_steps=layout.priority_steps,
            sep=layout.sep,
            global_keyprefix=layout.global_keyprefix,
            unacked_key=layout.unacked_key,
        )

    @property
    def priority_steps(self) -> tuple[int, ...]:
        return self.layout.priority_steps

    @property
    def sep(self) -> str:
        return self.layout.sep

    @property
    def global_keyprefix(self) -> str:
        return self.layout.global_keyprefix

    @property
    def unacked_hash(self) -> str:
        """The Redis hash of messages delivered and not yet acknowledged."""
        return self.layout.unacked_hash

    def list_key(self, queue: str, step: int) -> str:
        """The Redis list holding ``queue``'s messages of priority step ``step``."""
        return self.layout.list_key(queue, step)

    def list_keys(self, queue: str) -> list[str]:
        """Every Redis list holding ``queue``'s messages, one per priority step."""
        return self.layout.list_keys(queue)

    def sample(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        names = check_queues(queues)
        steps = self.layout.priority_steps
        with map_redis_errors("queue depth"):
            pipe = self.client.pipeline(transaction=False)
            for queue in names:
                for step in steps:
                    pipe.llen(self.layout.list_key(queue, step))
            lengths = [int(n) for n in pipe.execute()]
            unacked = self._unacked(set(names))
        width = len(steps)
        result = {}
        for index, queue in enumerate(names):
            row = lengths[index * width : (index + 1) * width]
            result[queue] = QueueDepth(
                queue,
                ready=sum(row),
                unacked=unacked.get(queue, 0),
                by_priority=tuple(zip(steps, row, strict=True)),
            )
        return result

    def _unacked(self, wanted: set[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        bindings: dict[str, list[tuple[str, str]]] = {}
        for _tag, raw in self.client.hscan_iter(self.layout.unacked_hash, count=_SCAN_COUNT):
            try:
                _message, exchange, routing_key = json.loads(raw)
            except (ValueError, TypeError):
                continue  # not kombu's format: nothing we can attribute
            for queue in self._route(str(exchange or ""), str(routing_key or ""), bindings):
                if queue in wanted:
                    counts[queue] = counts.get(queue, 0) + 1
        return counts

    def _route(
        self, exchange: str, routing_key: str, cache: dict[str, list[tuple[str, str]]]
    ) -> list[str]:
        """The queues kombu would restore this (exchange, routing key) to."""
        if not exchange:
            return [routing_key]
        if exchange not in cache:
            members = self.client.smembers(self.layout.binding_key(exchange))
            parsed = (self.layout.parse_binding(member) for member in members)
            cache[exchange] = [binding for binding in parsed if binding is not None]
        table = cache[exchange]
        exact = [queue for key, queue in table if key == routing_key]
        return exact or [queue for key, queue in table if key == ""]

    def close(self) -> None:
        self.client.close()


def management_url_for(amqp_url: str) -> str:
    """The management API of the broker at ``amqp_url``: same host and credentials,
    port :data:`RABBITMQ_MANAGEMENT_PORT`, ``https`` for ``amqps``."""
    parts = urlsplit(amqp_url)
    scheme = "https" if parts.scheme == "amqps" else "http"
    user = quote(unquote(parts.username or "guest"), safe="")
    password = quote(unquote(parts.password or "guest"), safe="")
    host = parts.hostname or "localhost"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{user}:{password}@{host}:{RABBITMQ_MANAGEMENT_PORT}"


def _vhost_of(connection: Connection) -> str:
    vhost = str(connection.virtual_host or "/")
    return vhost if vhost else "/"


class AmqpDepthProbe:
    """Depth of queues on RabbitMQ: ready and consumers from a passive ``queue.declare``
    per queue (through kombu), unacked from the management API.

    Args:
        connection: a ``kombu.Connection`` (or an ``amqp://`` URL).
        management_url: the management API's base URL (``http://user:pass@host:15672``);
            ``None`` derives it from the connection (:func:`management_url_for`).
        http: an ``httpx.Client`` to reuse (tests); one is made otherwise.

    A queue that does not exist yet has depth 0 (the passive declare's 404 is caught
    and the channel reopened).

    One probe is shared by every request thread of a front door, and a py-amqp
    connection is not thread-safe: two threads opening channels at once interleave
    their frames ("Received frame_end 0x01 while expecting 0xce") and one then waits
    for an answer that never comes. The connection is therefore used under a lock;
    the passive declares take a millisecond or two, so threads queue briefly.
    """

    broker = "amqp"

    def __init__(
        self,
        connection: Connection | str,
        *,
        management_url: str | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        from kombu import Connection

        self.connection = Connection(connection) if isinstance(connection, str) else connection
        self.management_url = (
            management_url or management_url_for(self.connection.as_uri(include_password=True))
        ).rstrip("/")
        self._http = http or httpx.Client(timeout=_MANAGEMENT_TIMEOUT_S)
        self._owns_http = http is None
        self._unacked_warned = False
        self._connection_lock = threading.Lock()

    def sample(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        names = check_queues(queues)
        with self._connection_lock:
            counts = self._declare_passively(names)
        unacked = self._unacked(names)
        return {
            queue: QueueDepth(queue, ready, unacked.get(queue, 0), consumers)
            for queue, (ready, consumers) in counts.items()
        }

    def _declare_passively(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """(ready, consumers) per queue; the caller holds the connection lock."""
        from amqp.exceptions import NotFound

        counts: dict[str, tuple[int, int]] = {}
        try:
            channel: Any = self.connection.channel()
            try:
                for queue in names:
                    try:
                        _, ready, consumers = channel.queue_declare(queue=queue, passive=True)
                    except NotFound:
                        channel = self.connection.channel()  # a 404 closes the channel
                        ready, consumers = 0, 0
                    counts[queue] = (int(ready), int(consumers))
            finally:
                channel.close()
        except self.connection.connection_errors as exc:
            raise BackendUnavailable(f"broker unreachable during queue depth: {exc}") from exc
        return counts

    def _unacked(self, names: list[str]) -> dict[str, int]:
        """``messages_unacknowledged`` per queue from the management API ({} if absent)."""
        vhost = quote(_vhost_of(self.connection), safe="")
        result: dict[str, int] = {}
        for queue in names:
            url = f"{self.management_url}/api/queues/{vhost}/{quote(queue, safe='')}"
            try:
                response = self._http.get(url, params={"columns": "messages_unacknowledged"})
            except httpx.HTTPError as exc:
                self._warn_unacked(type(exc).__name__)
                return {}
            if response.status_code == 404:
                continue  # not declared yet: nothing delivered either
            if response.status_code != 200:
                self._warn_unacked(f"HTTP {response.status_code}")
                return {}
            try:
                answer = response.json()
                if answer == []:
                    # The column filter found nothing: a quorum queue whose metrics
                    # have not been emitted yet (its first seconds). Nothing counted.
                    result[queue] = 0
                    continue
                result[queue] = int(answer.get("messages_unacknowledged") or 0)
            except (ValueError, TypeError, AttributeError):
                self._warn_unacked("unreadable answer")
                return {}
        return result

    def _warn_unacked(self, error: str) -> None:
        if not self._unacked_warned:
            self._unacked_warned = True
            log.warning(
                "amqp_unacked_unavailable",
                management_url=redact_url(self.management_url),
                error=error,
            )

    def close(self) -> None:
        with self._connection_lock:
            self.connection.release()
        if self._owns_http:
            self._http.close()


def probe_from_url(url: str, *, transport_options: Mapping[str, Any] | None = None) -> DepthProbe:
    """The probe for the broker at ``url``: ``redis://``/``rediss://`` or ``amqp://``.

    For RabbitMQ, ``transport_options["management_url"]`` names the management API
    when it is not on the broker's host at port 15672.

    Raises:
        ConfigurationError: any other scheme (SQS, …) — not supported.
    """
    scheme = urlsplit(url).scheme
    if scheme in _REDIS_SCHEMES:
        return RedisDepthProbe.from_url(url, transport_options=transport_options)
    if scheme in _AMQP_SCHEMES:
        management = (transport_options or {}).get("management_url")
        return AmqpDepthProbe(url, management_url=str(management) if management else None)
    raise ConfigurationError(
        f"no queue depth probe for broker {redact_url(url)}: use redis://, rediss:// or amqp://"
    )


def probe_for_app(app: Celery) -> DepthProbe:
    """The probe for a Celery app's broker (its URL and ``broker_transport_options``)."""
    url = str(app.conf.broker_url or "")
    if not url:
        raise ConfigurationError("the Celery app has no broker_url")
    options = dict(app.conf.broker_transport_options or {})
    return probe_from_url(url, transport_options=options)
