"""Per-process tidegate state for Celery workers: one Redis client, gates, parking, DLQ.

Built lazily in each pool process (after the fork), never shared across a fork.
Redis comes from ``app.conf.tidegate_redis_url``, else ``TIDEGATE_REDIS_URL``, else the
broker URL when the broker is Redis; the key prefix from ``app.conf.tidegate_prefix``,
else ``TIDEGATE_PREFIX``; ``TIDEGATE_FAIL_OPEN=true`` makes the gates admit when Redis is
unreachable (they fail closed by default).
"""

from __future__ import annotations

import os
import threading

from celery import Celery

from tidegate._redis import client_from_url
from tidegate.downstream import DownstreamClient
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptiveLoop,
    AdaptiveReporter,
    RedisAdaptiveStore,
)
from tidegate.keys import DEFAULT_PREFIX
from tidegate.load import DeadLetterQueue, DeliveryLedger, ParkingLot
from tidegate.load.outstanding import Outstanding
from tidegate.settings import Settings, adaptive_policy_from_env

__all__ = ["Runtime", "runtime"]


class Runtime:
    """What a worker process needs to gate, park, dead-letter and deduplicate."""

    def __init__(self, url: str, *, prefix: str = DEFAULT_PREFIX, fail_open: bool = False) -> None:
        self.client = client_from_url(url)
        self.prefix = prefix
        self.fail_open = fail_open
        self.parking = ParkingLot(self.client, prefix=prefix)
        self.dlq = DeadLetterQueue(self.client, prefix=prefix)
        self.ledger = DeliveryLedger(self.client, prefix=prefix)
        self.outstanding = Outstanding(self.client, prefix=prefix)
        self._gates: dict[str, Gate] = {}
        self._clients: dict[str, DownstreamClient] = {}
        self._adaptive: dict[str, AdaptiveLoop] = {}
        self._lock = threading.Lock()

    def gate(self, name: str) -> Gate:
        """The gate of downstream ``name`` (defaults from ``TIDEGATE_<NAME>_*``)."""
        with self._lock:
            if name not in self._gates:
                self._gates[name] = Gate(
                    self.client, name, prefix=self.prefix, fail_open=self.fail_open
                )
            return self._gates[name]

    def adaptive(self, name: str) -> AdaptiveLoop | None:
        """The adaptive controller loop of ``name`` in this process, started on first use;
        ``None`` unless ``TIDEGATE_<NAME>_ADAPTIVE`` is set (see
        :func:`tidegate.settings.adaptive_policy_from_env`)."""
        policy = adaptive_policy_from_env(name)
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
        for an adaptive downstream, every call to the fleet's controller.

        ``base_url`` defaults to ``TIDEGATE_<NAME>_URL``.
        """
        gate = self.gate(name)
        loop = self.adaptive(name)
        observer = None if loop is None else AdaptiveReporter(loop.controller, gate)
        with self._lock:
            if name not in self._clients:
                url = base_url or os.environ.get(f"TIDEGATE_{name.upper()}_URL")
                if not url:
                    raise ConfigurationError(
                        f"no URL for downstream {name!r}: set TIDEGATE_{name.upper()}_URL"
                    )
                self._clients[name] = DownstreamClient(name, url, feedback=gate, observer=observer)
            return self._clients[name]


_RUNTIMES: dict[tuple[int, int], Runtime] = {}
_LOCK = threading.Lock()


def _redis_url(app: Celery, settings: Settings) -> str:
    url = app.conf.get("tidegate_redis_url") or (
        settings.redis_url.get_secret_value() if settings.redis_url else None
    )
    if url:
        return str(url)
    broker = str(app.conf.broker_url or "")
    if broker.startswith(("redis://", "rediss://", "unix://")):
        return broker
    raise ConfigurationError(
        "tidegate needs Redis for its gates: set app.conf.tidegate_redis_url or "
        "TIDEGATE_REDIS_URL (the broker is not Redis)"
    )


def runtime(app: Celery) -> Runtime:
    """This process's runtime for ``app`` (re-created in a forked child)."""
    key = (os.getpid(), id(app))
    with _LOCK:
        if key not in _RUNTIMES:
            settings = Settings()
            prefix = str(app.conf.get("tidegate_prefix") or settings.prefix)
            _RUNTIMES[key] = Runtime(
                _redis_url(app, settings), prefix=prefix, fail_open=settings.fail_open
            )
        return _RUNTIMES[key]
