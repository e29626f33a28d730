"""The Celery worker's :class:`~tidegate.runtime.Runtime`: one per process and app.

Built lazily in each pool process (after the fork), never shared across a fork. What
is Celery's own here is only where tidegate's Redis is: ``app.conf.tidegate_redis_url``,
else ``TIDEGATE_REDIS_URL``, else the broker URL when the broker is Redis; and the key
prefix may be ``app.conf.tidegate_prefix``. The rest comes from the settings
(:class:`~tidegate.settings.Settings`), read once when the runtime is built.

A pool child is long-lived, so it runs a relay lane for each relayed downstream it
delivers to (:meth:`tidegate.runtime.Runtime.relay`), stopped when the child exits.
"""

from __future__ import annotations

import os
import threading

from celery import Celery
from celery.signals import worker_process_shutdown

from tidegate._redis import client_from_url
from tidegate.errors import ConfigurationError
from tidegate.runtime import Runtime
from tidegate.settings import Settings

__all__ = ["Runtime", "runtime"]


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
    """This process's runtime for ``app`` (re-created in a forked child), with the
    settings read once, when it is built."""
    key = (os.getpid(), id(app))
    with _LOCK:
        if key not in _RUNTIMES:
            settings = Settings.load()
            prefix = str(app.conf.get("tidegate_prefix") or settings.prefix)
            client = client_from_url(_redis_url(app, settings))
            _RUNTIMES[key] = Runtime(client, settings, prefix=prefix, relay_lanes=True)
        return _RUNTIMES[key]


@worker_process_shutdown.connect
def _stop_relay_lanes(**_: object) -> None:
    """A pool child about to exit (a warm shutdown, ``max_tasks_per_child``) answers
    what its relay lane has on the connection before it goes."""
    pid = os.getpid()
    with _LOCK:
        mine = [rt for (owner, _app), rt in _RUNTIMES.items() if owner == pid]
    for rt in mine:
        rt.stop_relays()
