"""Worker-side counting of decision events, for the fleet-wide metrics.

Runs in every worker process (Celery or RQ), as the first structlog processor: each
counted decision event becomes one HINCRBY in ``<prefix>:{metrics}:events``, which
:class:`~tidegate.ops.metrics.TidegateCollector` reads at scrape time. Kept apart from
the collector, which runs in the monitor or ``tidegate metrics``: the two share only
the key, the field separator and the wait buckets defined here.
:mod:`tidegate.ops.metrics` re-exports :class:`EventCounters` and
:func:`install_event_counters`.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

import redis
import structlog

from tidegate._redis import client_from_url
from tidegate.errors import TidegateError
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = ["GATE_WAIT_BUCKETS", "EventCounters", "install_event_counters"]


#: Upper bounds of the ``tidegate_gate_wait_seconds`` buckets, seconds.
GATE_WAIT_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


_SEP = "|"


def _events_key(prefix: str) -> str:
    return Keyspace(prefix).metrics_events()


def _bucket(wait_s: float) -> str:
    index = bisect.bisect_left(GATE_WAIT_BUCKETS, wait_s)
    return repr(GATE_WAIT_BUCKETS[index]) if index < len(GATE_WAIT_BUCKETS) else "+Inf"


class EventCounters:
    """A structlog processor counting decision events into Redis, for fleet-wide metrics.

    Every decision is already one structured event, so counting the events keeps the
    metrics and the logs consistent by construction. Counted:

    - ``downstream_gate_throttled`` → throttles by downstream, reason and mode; with
      mode ``reserve`` (admitted after sleeping ``wait_s``) also the wait histogram;
    - ``downstream_gate_paused`` with ``pause_s`` (a pause set) → pauses by reason;
      with ``wait_s`` (a worker waiting a pause out) → the wait histogram;
    - ``downstream_throttled`` (the downstream answered 429) → 429s by downstream.

    One pipelined HINCRBY round trip per counted event, in the process that made the
    decision; a Redis error drops the count (``dropped``), never the log line.

    Args:
        client: a Redis client, or a factory called once per process (after a fork).
        prefix: tidegate's key prefix.
    """

    def __init__(
        self, client: redis.Redis | Callable[[], redis.Redis], *, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self._factory: Callable[[], redis.Redis] = (
            (lambda: client) if isinstance(client, redis.Redis) else client
        )
        self.key = _events_key(prefix)
        self.dropped = 0
        self._client: redis.Redis | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def _redis(self) -> redis.Redis:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client, self._pid = self._factory(), os.getpid()
            return self._client

    def increments(self, event: MutableMapping[str, Any]) -> dict[str, float]:
        """The counter increments one event adds (pure; empty for other events)."""
        name = event.get("event")
        downstream = str(event.get("downstream", ""))
        out: dict[str, float] = {}
        wait = event.get("wait_s")
        if name == "downstream_gate_throttled":
            reason, mode = event.get("reason", ""), event.get("mode", "")
            out[_SEP.join(("throttles", downstream, str(reason), str(mode)))] = 1
            if mode == "reserve" and isinstance(wait, int | float):
                self._wait(out, downstream, float(wait))
        elif name == "downstream_gate_paused":
            if "pause_s" in event:
                out[_SEP.join(("pauses", downstream, str(event.get("reason", ""))))] = 1
            elif isinstance(wait, int | float):
                self._wait(out, downstream, float(wait))
        elif name == "downstream_throttled" and event.get("status", 429) == 429:
            out[_SEP.join(("http_429", downstream))] = 1
        return out

    @staticmethod
    def _wait(out: dict[str, float], downstream: str, wait_s: float) -> None:
        if not math.isfinite(wait_s) or wait_s < 0:
            return
        out[_SEP.join(("gate_wait", downstream, _bucket(wait_s)))] = 1
        out[_SEP.join(("gate_wait_sum", downstream))] = wait_s
        out[_SEP.join(("gate_wait_count", downstream))] = 1

    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        increments = self.increments(event_dict)
        if increments:
            try:
                pipe = self._redis().pipeline(transaction=False)
                for field, amount in increments.items():
                    if float(amount).is_integer():
                        pipe.hincrby(self.key, field, int(amount))
                    else:
                        pipe.hincrbyfloat(self.key, field, amount)
                pipe.execute()
            except (redis.RedisError, OSError, TidegateError):
                self.dropped += 1
        return event_dict


_METHOD_LEVELS = {"warn": "WARNING", "exception": "ERROR", "msg": "INFO", "fatal": "CRITICAL"}


class _DropBelow:
    """Drop events below ``level`` (after they were counted)."""

    __slots__ = ("_minimum",)

    def __init__(self, level: str) -> None:
        self._minimum = logging.getLevelNamesMapping()[level.upper()]

    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        name = _METHOD_LEVELS.get(method_name, method_name.upper())
        if logging.getLevelNamesMapping().get(name, logging.INFO) < self._minimum:
            raise structlog.DropEvent
        return event_dict


def install_event_counters(
    client: redis.Redis | Callable[[], redis.Redis] | str,
    *,
    prefix: str = DEFAULT_PREFIX,
    level: str | None = None,
) -> EventCounters:
    """Put an :class:`EventCounters` first in structlog's processor chain.

    Call it after :func:`tidegate.logging.configure` in each worker (a Celery
    ``celeryd_init`` handler, or the RQ worker's start-up). A URL is connected lazily
    once per process, so it is safe before a prefork pool forks.

    Args:
        client: tidegate's Redis: a client, a factory, or a URL.
        prefix: tidegate's key prefix.
        level: the level the logs should *show*. The counted events are INFO, and a
            logger filtering at WARNING never builds them; with ``level`` the logger
            is opened to INFO and the events below ``level`` are dropped after
            counting, so the counts do not depend on the log level.
    """
    factory: redis.Redis | Callable[[], redis.Redis] = (
        (lambda: client_from_url(client)) if isinstance(client, str) else client
    )
    counters = EventCounters(factory, prefix=prefix)
    processors: list[Any] = [
        p
        for p in structlog.get_config()["processors"]
        if not isinstance(p, EventCounters | _DropBelow)
    ]
    chain: list[Any] = [counters]
    options: dict[str, Any] = {}
    if level is not None:
        chain.append(_DropBelow(level))
        shown = logging.getLevelNamesMapping()[level.upper()]
        options["wrapper_class"] = structlog.make_filtering_bound_logger(min(shown, logging.INFO))
    structlog.configure(processors=chain + processors, **options)
    return counters
