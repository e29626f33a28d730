"""The broker of a demo or chaos run: the Redis store itself, or a RabbitMQ vhost.

:func:`~tidegate.harness.scenarios.vessel.run_vessel_demo` asks its broker for four things —
the workers' environment, a configured producer, the queue depths of each sample, and
the keys still in the broker at the end (the reconciliation's ``pending``) — so the
run itself does not care which broker carries the messages. tidegate's own state
(gates, leases, parking, ledger, DLQ) stays on Redis either way.

On RabbitMQ a run gets a **vhost of its own** (``tidegate-<run>``), created through the
management API and deleted at the end: its queues, the dead-letter exchange and queue
and every message are the run's alone, so concurrent runs and other users of the
broker never see each other's work, and nothing is left behind. Depth is ready
(a passive declare, exact) + unacknowledged (the management API, refreshed every
``collect_statistics_interval``). At the end, with the workers stopped (their
unacknowledged messages are back in the queues), each queue's messages are read
through the management API with ``ack_requeue_true`` — read, not consumed — and their
unit keys go to the reconciliation, the dead-letter queue's included (a letter the
workers had not drained yet is still on its way, not lost).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from tidegate._redis import redact_url
from tidegate.delivery import unit_key
from tidegate.errors import BackendError, BackendUnavailable, BrokerUnreachable
from tidegate.integrations.celery.amqp_topology import AmqpTopology, is_amqp_url
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from celery import Celery

    from tidegate.integrations.celery.depth import AmqpDepthProbe
    from tidegate.load.outstanding import Outstanding

__all__ = ["AmqpRunBroker", "RedisRunBroker", "RunBroker", "open_amqp_broker", "run_broker_for"]

log = get_logger("tidegate.ops")

_HTTP_TIMEOUT_S = 5.0
#: Messages read per management-API ``get`` when listing what is left in a queue.
_READ_PAGE = 5000


class RunBroker(Protocol):
    """What a run needs from its broker (see the module docstring)."""

    #: ``"redis"`` or ``"amqp"``: goes in the report.
    kind: str
    #: The workers' broker URL.
    url: str

    def worker_env(self) -> dict[str, str]: ...

    def producer(self) -> Celery: ...

    def track(
        self, producer: Celery, tasks: Sequence[str], outstanding: Outstanding
    ) -> Callable[[], None]: ...

    def depths(self, queues: Sequence[str]) -> dict[str, int]: ...

    def pending_keys(self, queues: Sequence[str]) -> list[str]: ...

    def close(self) -> None: ...


class RedisRunBroker:
    """The Redis store as the broker (the default): kombu's lists and ``unacked`` hash."""

    kind = "redis"

    def __init__(self, url: str, client: Any) -> None:
        self.url = url
        self.client = client

    def worker_env(self) -> dict[str, str]:
        return {}

    def producer(self) -> Celery:
        """On tidegate's broker channel, as the workers are: tracked publishes then
        record, push and confirm in one script (``tracked_push``), not three trips."""
        from celery import Celery

        from tidegate.integrations.celery.broker import install_write_tolerant_broker

        app = Celery(broker=self.url)
        install_write_tolerant_broker(app)
        return app

    def track(
        self, producer: Celery, tasks: Sequence[str], outstanding: Outstanding
    ) -> Callable[[], None]:
        """The intake records what it publishes, so the workers' orphan sweep can give
        back a message the Redis broker loses to a killed worker."""
        from tidegate.integrations.celery.sweep import track_publishes

        return track_publishes(tasks, outstanding, app=producer)

    def depths(self, queues: Sequence[str]) -> dict[str, int]:
        from tidegate.harness.burst_run import queue_depths

        return queue_depths(self.client, list(queues))

    def pending_keys(self, queues: Sequence[str]) -> list[str]:
        from tidegate.harness.reconcile import keys_in_messages

        raws: list[bytes] = []
        for queue in queues:
            raws.extend(self.client.lrange(queue, 0, -1))
        raws.extend(self.client.hvals("unacked"))
        return keys_in_messages(raws)

    def close(self) -> None:
        pass


def _with_vhost(url: str, vhost: str) -> str:
    """``url`` on ``vhost``; each URL of a kombu failover list (``a;b;c``) likewise."""
    urls = []
    for one in url.split(";"):
        parts = urlsplit(one)
        urls.append(urlunsplit((parts.scheme, parts.netloc, "/" + quote(vhost, safe=""), "", "")))
    return ";".join(urls)


def _http_base(management_url: str) -> tuple[str, tuple[str, str]]:
    """The management API's base URL without credentials, and the credentials."""
    parts = urlsplit(management_url.rstrip("/"))
    host = parts.hostname or "localhost"
    netloc = f"{host}:{parts.port}" if parts.port else host
    auth = (parts.username or "guest", parts.password or "guest")
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")), auth


@contextlib.contextmanager
def run_broker_for(url: str | None) -> Iterator[AmqpRunBroker | None]:
    """The run's RabbitMQ vhost on the broker at ``url`` (closed at the end), or
    ``None`` for no ``url`` (the Redis store is the broker). The management API is
    ``RABBITMQ_MANAGEMENT_URL`` when set, else the broker's host on port 15672.

    Raises:
        BrokerUnreachable: see :func:`open_amqp_broker`; raised before anything starts.
    """
    if url is None:
        yield None
        return
    broker = open_amqp_broker(url, management_url=os.environ.get("RABBITMQ_MANAGEMENT_URL"))
    try:
        yield broker
    finally:
        broker.close()


def open_amqp_broker(
    url: str, *, management_url: str | None = None, run_id: str | None = None
) -> AmqpRunBroker:
    """A RabbitMQ broker for one run: checks ``url`` answers, creates the run's vhost.

    Raises:
        BrokerUnreachable: the broker or its management API cannot be reached or refuses
            the credentials; the message names the URL with the password redacted.
    """
    from kombu import Connection

    from tidegate.integrations.celery.depth import management_url_for

    shown = ";".join(redact_url(one) for one in url.split(";"))
    if not all(is_amqp_url(one) for one in url.split(";")):
        raise BrokerUnreachable(f"not a RabbitMQ URL: {shown} (use amqp://)")
    try:
        with Connection(url, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
    except Exception as exc:  # kombu raises many kinds; all mean "cannot use it"
        raise BrokerUnreachable(
            f"cannot reach the broker {shown}: {type(exc).__name__}: {str(exc)[:120]}"
        ) from None
    first = url.split(";", maxsplit=1)[0]
    management = management_url or management_url_for(first)
    base, auth = _http_base(management)
    user = urlsplit(first).username or "guest"
    vhost = f"tidegate-{run_id or uuid.uuid4().hex[:8]}"
    http = httpx.Client(base_url=base, auth=auth, timeout=_HTTP_TIMEOUT_S)
    try:
        created = http.put(f"/api/vhosts/{quote(vhost, safe='')}")
        granted = http.put(
            f"/api/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}",
            json={"configure": ".*", "write": ".*", "read": ".*"},
        )
    except httpx.HTTPError as exc:
        http.close()
        raise BrokerUnreachable(
            f"cannot reach the management API of {shown} at {redact_url(management)}: "
            f"{type(exc).__name__} (set RABBITMQ_MANAGEMENT_URL)"
        ) from None
    for response in (created, granted):
        if response.status_code not in (200, 201, 204):
            http.close()
            raise BrokerUnreachable(
                f"the management API of {shown} refused to create the run's vhost "
                f"(HTTP {response.status_code}); the demo's user needs the administrator tag"
            )
    log.info("amqp_run_vhost_created", broker=shown, vhost=vhost)
    return AmqpRunBroker(_with_vhost(url, vhost), vhost, management, http)


class AmqpRunBroker:
    """One run's vhost on RabbitMQ (made by :func:`open_amqp_broker`)."""

    kind = "amqp"

    def __init__(self, url: str, vhost: str, management_url: str, http: httpx.Client) -> None:
        self.url = url
        self.vhost = vhost
        self.management_url = management_url
        self._http = http
        self._probe: AmqpDepthProbe | None = None
        self.topology = AmqpTopology()

    def worker_env(self) -> dict[str, str]:
        return {"TIDEGATE_BROKER_URL": self.url}

    def producer(self) -> Celery:
        """Configured like the workers: quorum queue arguments and publisher confirms
        (RabbitMQ refuses a declaration whose arguments differ from the workers')."""
        from celery import Celery

        from tidegate.integrations.celery import configure

        return configure(Celery(broker=self.url, set_as_current=False))

    def track(
        self, producer: Celery, tasks: Sequence[str], outstanding: Outstanding
    ) -> Callable[[], None]:
        """Nothing to track: RabbitMQ keeps a delivered message until it is acknowledged
        and requeues it when the consumer's connection closes (no orphan sweep)."""
        return lambda: None

    def depths(self, queues: Sequence[str]) -> dict[str, int]:
        """Per queue ready + unacknowledged, and ``unacked`` over all of them."""
        from tidegate.integrations.celery.depth import AmqpDepthProbe

        if self._probe is None:
            self._probe = AmqpDepthProbe(self.url, management_url=self.management_url)
        try:
            sample = self._probe.sample(list(queues))
        except (BackendError, OSError):
            # A restarted broker: the next sample reconnects with a fresh probe.
            self._drop_probe()
            raise
        depth = {queue: d.ready for queue, d in sample.items()}
        depth["unacked"] = sum(d.unacked for d in sample.values())
        return depth

    def _drop_probe(self) -> None:
        if self._probe is not None:
            # A dead connection may fail to release; it is dropped either way.
            with contextlib.suppress(Exception):
                self._probe.close()
            self._probe = None

    def queue_totals(self) -> dict[str, dict[str, int]]:
        """Every queue of the vhost: ready and unacknowledged, from the management API."""
        response = self._get(
            f"/api/queues/{quote(self.vhost, safe='')}",
            params={"columns": "name,messages_ready,messages_unacknowledged"},
        )
        return {
            str(q["name"]): {
                "ready": int(q.get("messages_ready") or 0),
                "unacked": int(q.get("messages_unacknowledged") or 0),
            }
            for q in response.json()
        }

    def pending_keys(self, queues: Sequence[str]) -> list[str]:
        """The unit keys of the messages still in ``queues`` and in the dead-letter
        queue, read without consuming them (call with the workers stopped)."""
        keys: list[str] = []
        for queue in [*queues, self.topology.dead_letter_queue]:
            keys.extend(self._keys_in(queue))
        return keys

    def _keys_in(self, queue: str) -> list[str]:
        path = f"/api/queues/{quote(self.vhost, safe='')}/{quote(queue, safe='')}/get"
        response = self._request(
            "POST",
            path,
            json={"count": _READ_PAGE, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )
        if response.status_code == 404:
            return []
        keys = []
        for message in response.json():
            if message.get("payload_encoding") != "string":
                continue  # not Celery's JSON (e.g. pickle): carries no key we can read
            try:
                body = json.loads(message["payload"])
                args, kwargs = body[0], body[1]
            except (ValueError, KeyError, TypeError, IndexError):
                continue
            key = unit_key(args, kwargs)
            if key is not None:
                keys.append(key)
        return keys

    def _get(self, path: str, **kwargs: Any) -> httpx.Response:
        response = self._request("GET", path, **kwargs)
        if response.status_code != 200:
            raise BackendUnavailable(f"management API answered {response.status_code} for {path}")
        return response

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"management API unreachable: {type(exc).__name__}") from exc

    def close(self) -> None:
        """Delete the run's vhost (its queues and messages) and release the clients."""
        self._drop_probe()
        try:
            self._http.delete(f"/api/vhosts/{quote(self.vhost, safe='')}")
        except httpx.HTTPError as exc:
            log.warning("amqp_run_vhost_left", vhost=self.vhost, error=type(exc).__name__)
        self._http.close()
