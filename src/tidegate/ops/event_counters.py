"""Worker-side counting of decision events, for the fleet-wide metrics.

Runs in every worker process (Celery or RQ) as a subscriber of the default event sink
(:mod:`tidegate.events`): each counted decision becomes one HINCRBY in
``<prefix>:{metrics}:events``, which :class:`~tidegate.ops.metrics.TidegateCollector`
reads at scrape time. It subscribes to typed events, not to log lines, so the log level
cannot change a count (it once was a structlog processor, and a filtered log call never
reached it). Kept apart from the collector, which runs in the monitor or ``tidegate
metrics``: the two share only the key, the field separator and the wait buckets defined
here. :mod:`tidegate.ops.metrics` re-exports :class:`EventCounters` and
:func:`install_event_counters`.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
from collections.abc import Callable

import redis

from tidegate._redis import client_from_url
from tidegate.errors import TidegateError
from tidegate.events import (
    DownstreamAnswered429,
    Event,
    GatePaused,
    GatePauseWaited,
    GateThrottled,
    sink,
)
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


def _not_installed() -> None:
    return None


class EventCounters:
    """An event subscriber counting decisions into Redis, for fleet-wide metrics.

    Counted:

    - :class:`~tidegate.events.GateThrottled` → throttles by downstream, reason and
      mode; with mode ``reserve`` (admitted after sleeping ``wait_s``) also the wait
      histogram;
    - :class:`~tidegate.events.GatePaused` (a pause set) → pauses by reason;
      :class:`~tidegate.events.GatePauseWaited` (a worker waiting a pause out) → the
      wait histogram;
    - :class:`~tidegate.events.DownstreamAnswered429` → 429s by downstream.

    One pipelined HINCRBY round trip per counted event, in the process that made the
    decision; a Redis error drops the count (``dropped``), never the decision.

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
        #: Removes it from the sink :func:`install_event_counters` subscribed it to.
        self.uninstall: Callable[[], None] = _not_installed

    def _redis(self) -> redis.Redis:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client, self._pid = self._factory(), os.getpid()
            return self._client

    def increments(self, event: Event) -> dict[str, float]:
        """The counter increments one event adds (pure; empty for other events)."""
        out: dict[str, float] = {}
        match event:
            case GateThrottled(downstream=downstream, reason=reason, mode=mode, wait_s=wait):
                out[_SEP.join(("throttles", downstream, reason, mode))] = 1
                if mode == "reserve":
                    self._wait(out, downstream, float(wait))
            case GatePaused(downstream=downstream, reason=reason):
                out[_SEP.join(("pauses", downstream, reason))] = 1
            case GatePauseWaited(downstream=downstream, wait_s=wait):
                self._wait(out, downstream, float(wait))
            case DownstreamAnswered429(downstream=downstream, status=429):
                out[_SEP.join(("http_429", downstream))] = 1
        return out

    @staticmethod
    def _wait(out: dict[str, float], downstream: str, wait_s: float) -> None:
        if not math.isfinite(wait_s) or wait_s < 0:
            return
        out[_SEP.join(("gate_wait", downstream, _bucket(wait_s)))] = 1
        out[_SEP.join(("gate_wait_sum", downstream))] = wait_s
        out[_SEP.join(("gate_wait_count", downstream))] = 1

    def __call__(self, event: Event) -> None:
        increments = self.increments(event)
        if not increments:
            return
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


def install_event_counters(
    client: redis.Redis | Callable[[], redis.Redis] | str,
    *,
    prefix: str = DEFAULT_PREFIX,
    level: str | None = None,
) -> EventCounters:
    """Subscribe an :class:`EventCounters` to the default event sink.

    Call it in each worker (a Celery ``celeryd_init`` handler, or the RQ worker's
    start-up). A URL is connected lazily once per process, so it is safe before a
    prefork pool forks. A counter installed earlier in this process is replaced, so a
    decision is never counted twice.

    Args:
        client: tidegate's Redis: a client, a factory, or a URL.
        prefix: tidegate's key prefix.
        level: accepted for the callers written when the counters were a log
            processor and had to open the logger to INFO; counting no longer depends on
            any log level, so it changes nothing.
    """
    del level
    factory: redis.Redis | Callable[[], redis.Redis] = (
        (lambda: client_from_url(client)) if isinstance(client, str) else client
    )
    counters = EventCounters(factory, prefix=prefix)
    for subscriber in sink().subscribers:
        if isinstance(subscriber, EventCounters):
            subscriber.uninstall()
    counters.uninstall = sink().subscribe(counters)
    return counters
