"""One runtime per process: what every engine needs to gate, park, dead-letter and
deduplicate, built from one :class:`~tidegate.settings.Settings`.

Celery (``tidegate.integrations.celery.runtime``) and RQ
(``tidegate.integrations.rq``) each hold a :class:`Runtime` per process and Redis
client; they differ only in where tidegate's Redis comes from (the app's config or
the broker; the job's connection). So a gate's defaults, a downstream's URL, its
adaptive controller and its commit wait are found the same way on every engine, from
the one settings object, and never re-read from the environment by a second module.

Built lazily in each process (after a fork), never shared across one.
"""

from __future__ import annotations

import threading

import redis

from tidegate.delivery import Stores
from tidegate.downstream import DownstreamClient, RelayTransport
from tidegate.downstream.relay import Relay, RelayPolicy
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptiveLoop,
    AdaptiveReporter,
    RedisAdaptiveStore,
)
from tidegate.load import DeadLetterQueue, DeliveryLedger, ParkingLot
from tidegate.load.outstanding import Outstanding
from tidegate.settings import DownstreamSettings, Settings

__all__ = ["Runtime"]


class Runtime:
    """A process's stores, gates, adaptive loops and downstream clients on one Redis.

    Args:
        client: tidegate's Redis.
        settings: the process's settings (:meth:`Settings.load`).
        prefix: overrides ``settings.prefix`` (a Celery app's ``tidegate_prefix``).
        relay_lanes: run a relay lane in this process for each relayed downstream it
            delivers to (:meth:`relay`). For a long-lived worker process (a Celery pool
            child); not for one that ends with its job (an RQ work horse), whose
            downstream's lanes run in ``tidegate relay NAME`` processes.
    """

    def __init__(
        self,
        client: redis.Redis,
        settings: Settings,
        *,
        prefix: str | None = None,
        relay_lanes: bool = False,
    ) -> None:
        self.client = client
        self.settings = settings
        self.prefix = prefix or settings.prefix
        self.fail_open = settings.fail_open
        self.parking = ParkingLot(client, prefix=self.prefix)
        self.dlq = DeadLetterQueue(client, prefix=self.prefix)
        self.ledger = DeliveryLedger(client, prefix=self.prefix)
        self.outstanding = Outstanding(client, prefix=self.prefix)
        self._gates: dict[str, Gate] = {}
        self._clients: dict[str, DownstreamClient] = {}
        self._adaptive: dict[str, AdaptiveLoop] = {}
        self._relays: dict[str, Relay] = {}
        self._relay_lanes = relay_lanes
        self._lock = threading.Lock()

    def settings_of(self, name: str) -> DownstreamSettings:
        """Downstream ``name``'s settings (URL, gate defaults, adaptive, commit wait)."""
        return self.settings.downstream(name)

    def gate(self, name: str) -> Gate:
        """The gate of downstream ``name`` (defaults from the settings).

        For a relayed downstream it admits by the rate and the pause only: the relay's
        lanes hold the concurrency leases (:meth:`relay`).
        """
        settings = self.settings_of(name)
        with self._lock:
            if name not in self._gates:
                self._gates[name] = Gate(
                    self.client,
                    name,
                    prefix=self.prefix,
                    fail_open=self.fail_open,
                    policy=settings.gate,
                    leases=settings.relay_depth is None,
                )
            return self._gates[name]

    def stores(self, name: str, *, outstanding: bool = True) -> Stores:
        """What the unit lifecycle shares with every engine for downstream ``name``.

        ``outstanding=False`` for an engine that recovers a dead worker's job itself
        (RQ) and so needs no orphan registry.

        Every engine asks for these before the unit's lifecycle, so the downstream's
        client is built here too when its URL is configured: built lazily inside the
        call, its setup (an httpx client and its TLS context, about a second per
        process while a fleet starts on two busy cores) was paid with a concurrency
        lease held and no request in service — the first call of every process idled
        a TOS connection for that long.
        """
        if self.settings_of(name).url:
            self.downstream(name)
        return Stores(
            self.gate(name),
            self.ledger,
            self.dlq,
            self.outstanding if outstanding else None,
        )

    def adaptive(self, name: str) -> AdaptiveLoop | None:
        """The adaptive controller loop of ``name`` in this process, started on first use;
        ``None`` unless ``TIDEGATE_<NAME>_ADAPTIVE`` is set."""
        policy = self.settings_of(name).adaptive
        if policy is None:
            return None
        gate = self.gate(name)
        with self._lock:
            if name not in self._adaptive:
                store = RedisAdaptiveStore(self.client)
                controller = AdaptiveController(store, name, policy, prefix=self.prefix)
                loop = AdaptiveLoop(controller, gate)
                loop.start()
                self._adaptive[name] = loop
            return self._adaptive[name]

    def downstream(self, name: str, base_url: str | None = None) -> DownstreamClient:
        """This process's HTTP client for ``name``; it reports every 429 to the gate and,
        for an adaptive downstream, every call to the fleet's controller. For a relayed
        one it hands each call to the relay, and building it starts this process's lane.

        ``base_url`` defaults to ``TIDEGATE_<NAME>_URL``.

        Raises:
            ConfigurationError: no URL for ``name``.
        """
        gate = self.gate(name)
        loop = self.adaptive(name)
        observer = None if loop is None else AdaptiveReporter(loop.controller, gate)
        with self._lock:
            built = name not in self._clients
            if built:
                url = base_url or self.settings_of(name).url
                if not url:
                    raise ConfigurationError(
                        f"no URL for downstream {name!r}: set TIDEGATE_{name.upper()}_URL"
                    )
                transport = None
                if self.settings_of(name).relay_depth is not None:
                    transport = RelayTransport(self.client, name, prefix=self.prefix)
                self._clients[name] = DownstreamClient(
                    name, url, feedback=gate, observer=observer, transport=transport
                )
            client = self._clients[name]
        if built:  # once, not on every unit's call (relay() takes the lock again)
            self.relay(name)
        return client

    def relay(self, name: str) -> Relay | None:
        """This process's relay lane for ``name``, started on first use; ``None`` unless
        ``TIDEGATE_<NAME>_RELAY_DEPTH`` is set and the runtime runs lanes.

        Every process that delivers to a relayed downstream runs one lane: the gate's
        concurrency cap lets that many of them hold a connection, and the others wait
        on a lease, ready to take over when a lane's process dies or is recycled. One
        lane a process spreads the lanes' work over the pool's processes (and GILs).
        """
        settings = self.settings_of(name)
        if settings.relay_depth is None or not self._relay_lanes:
            return None
        with self._lock:
            if name not in self._relays:
                if not settings.url:
                    raise ConfigurationError(
                        f"no URL for downstream {name!r}: set TIDEGATE_{name.upper()}_URL"
                    )
                policy = RelayPolicy(depth=settings.relay_depth)
                relay = Relay(
                    self.client,
                    name,
                    settings.url,
                    lanes=1,
                    policy=policy,
                    prefix=self.prefix,
                    gate_policy=settings.gate,
                )
                self._relays[name] = relay.start()
            return self._relays[name]

    def stop_relays(self, timeout_s: float = 10.0) -> None:
        """Stop this process's lanes: they take no more requests and answer those on
        their connections (a pool child about to exit calls this; a lane that died with
        its process would leave its workers waiting out their read timeout)."""
        with self._lock:
            relays = list(self._relays.values())
            self._relays.clear()
        for relay in relays:
            relay.stop(timeout_s)
