"""Per-process state of an RQ worker: tidegate's Redis client, prefix, gates and stores."""

from __future__ import annotations

import os
import threading

import redis
from rq.job import get_current_job

from tidegate._redis import client_from_url
from tidegate.delivery import Stores
from tidegate.downstream import DownstreamClient
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.keys import DEFAULT_PREFIX
from tidegate.load import DeadLetterQueue, DeliveryLedger

__all__ = ["client_for_job", "downstream_client", "gate_for", "prefix", "stores_for"]

_GATES: dict[tuple[int, int, str, str], Gate] = {}
_CLIENTS: dict[tuple[int, str], redis.Redis] = {}
_DOWNSTREAMS: dict[tuple[int, str], DownstreamClient] = {}
_LOCK = threading.Lock()


def prefix() -> str:
    """tidegate's key prefix: ``TIDEGATE_PREFIX``, else the default."""
    return os.environ.get("TIDEGATE_PREFIX") or DEFAULT_PREFIX


def client_for_job(connection: redis.Redis | None = None) -> redis.Redis:
    """tidegate's Redis: ``TIDEGATE_REDIS_URL`` if set, else the (current) job's connection."""
    url = os.environ.get("TIDEGATE_REDIS_URL")
    if url:
        key = (os.getpid(), url)
        with _LOCK:
            if key not in _CLIENTS:
                _CLIENTS[key] = client_from_url(url)
            return _CLIENTS[key]
    if connection is None:
        job = get_current_job()
        connection = job.connection if job is not None else None
    if connection is None:
        raise ConfigurationError(
            "no Redis for tidegate: set TIDEGATE_REDIS_URL or run inside an RQ job"
        )
    return connection


def gate_for(name: str, client: redis.Redis | None = None) -> Gate:
    """This process's gate of downstream ``name`` (defaults from ``TIDEGATE_<NAME>_*``)."""
    client = client if client is not None else client_for_job()
    key = (os.getpid(), id(client), prefix(), name)
    with _LOCK:
        if key not in _GATES:
            _GATES[key] = Gate(client, name, prefix=prefix())
        return _GATES[key]


def stores_for(name: str, client: redis.Redis | None = None) -> Stores:
    """What the lifecycle shares with every engine: gate, ledger and DLQ of ``name``.

    No outstanding registry: RQ keeps every job in Redis and recovers one whose
    worker died itself (see :mod:`tidegate.integrations.rq.dlq`).
    """
    client = client if client is not None else client_for_job()
    return Stores(
        gate_for(name, client),
        DeliveryLedger(client, prefix=prefix()),
        DeadLetterQueue(client, prefix=prefix()),
    )


def downstream_client(name: str) -> DownstreamClient:
    """This process's HTTP client for ``name`` at ``TIDEGATE_<NAME>_URL`` (lookups)."""
    url = os.environ.get(f"TIDEGATE_{name.upper()}_URL")
    if not url:
        raise ConfigurationError(f"no URL for downstream {name!r}: set TIDEGATE_{name.upper()}_URL")
    key = (os.getpid(), name)
    gate = gate_for(name)  # the lookup's 429s pause the fleet like the calls'
    with _LOCK:
        if key not in _DOWNSTREAMS:
            _DOWNSTREAMS[key] = DownstreamClient(name, url, feedback=gate)
        return _DOWNSTREAMS[key]
