"""The RQ worker's :class:`~tidegate.runtime.Runtime`: one per process and Redis client.

What is RQ's own here is only where tidegate's Redis is: ``TIDEGATE_REDIS_URL`` when
set, else the current job's connection. Everything else (prefix, gate defaults, URLs,
adaptive controllers, commit waits) comes from the settings, read once when the
runtime is built — the same object and the same rules as a Celery worker's.
"""

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
from tidegate.runtime import Runtime
from tidegate.settings import Settings

__all__ = ["client_for_job", "downstream_client", "gate_for", "prefix", "runtime_for", "stores_for"]

_RUNTIMES: dict[tuple[int, int], Runtime] = {}
_CLIENTS: dict[tuple[int, str], redis.Redis] = {}
_LOCK = threading.Lock()


def prefix() -> str:
    """tidegate's key prefix (``TIDEGATE_PREFIX``, else the default)."""
    return runtime_for(client_for_job()).prefix


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


def runtime_for(client: redis.Redis | None = None) -> Runtime:
    """This process's runtime on ``client`` (default: :func:`client_for_job`)."""
    client = client if client is not None else client_for_job()
    key = (os.getpid(), id(client))
    with _LOCK:
        if key not in _RUNTIMES:
            _RUNTIMES[key] = Runtime(client, Settings.load())
        return _RUNTIMES[key]


def gate_for(name: str, client: redis.Redis | None = None) -> Gate:
    """This process's gate of downstream ``name`` (defaults from ``TIDEGATE_<NAME>_*``)."""
    return runtime_for(client).gate(name)


def stores_for(name: str, client: redis.Redis | None = None) -> Stores:
    """What the lifecycle shares with every engine: gate, ledger and DLQ of ``name``.

    No outstanding registry: RQ keeps every job in Redis and recovers one whose
    worker died itself (see :mod:`tidegate.integrations.rq.dlq`).
    """
    return runtime_for(client).stores(name, outstanding=False)


def downstream_client(name: str) -> DownstreamClient:
    """This process's HTTP client for ``name`` at ``TIDEGATE_<NAME>_URL``: its 429s pause
    the fleet's gate, and an adaptive downstream's calls feed its controller."""
    return runtime_for().downstream(name)
