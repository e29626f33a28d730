"""A terminal operating system (TOS): a hard cap on requests in flight.

The TOS takes at most ``max_connections`` requests at once; one more is answered 503
straight away. Each accepted request holds its slot for ``service_s`` seconds, so the
sustained capacity is ``max_connections / service_s`` calls per second and a fleet
that opens more connections only collects 503s.

With a ``capacity`` below ``max_connections`` it also degrades before it refuses, the
way a real TOS does long before its connection limit: up to ``capacity`` calls in
service each take ``service_s``; beyond that they share it, and a call arriving with
``n`` in service (itself included) takes ``service_s × n / capacity``. Throughput stops
growing at ``capacity`` while latency keeps growing — what a latency-driven concurrency
limit has to find without being told.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tidegate.errors import ConfigurationError
from tidegate.logging import get_logger
from tidegate.sim._base import DEFAULT_HOST, Clock, SimServer, Verdict, check_positive

__all__ = ["TosSim"]

log = get_logger("tidegate.sim")


class TosSim(SimServer):
    """The terminal operating system: at most ``max_connections`` requests in flight.

    Args:
        max_connections: accepted requests in service at once (>= 1); beyond, 503.
        service_s: how long each accepted request takes, in seconds (>= 0).
        retry_after_s: a ``Retry-After`` (whole seconds) sent with the 503; ``None``
            (the default) sends none, like most TOS front ends.
        capacity: calls served at full speed (1 <= capacity <= max_connections); beyond
            it latency grows in proportion to the calls in service. ``None`` (the
            default): every accepted call takes ``service_s``. The accepted answer then
            carries ``latency_s`` and ``in_service``.
        path: the write path.
        host, port, clock, wall_clock, sleep: see :class:`~tidegate.sim.SimServer`.

    Example::

        with TosSim(max_connections=4, service_s=0.2) as tos:
            ...  # 20 calls per second at most, 4 at a time
    """

    kind = "tos"

    def __init__(
        self,
        max_connections: int = 4,
        service_s: float = 0.05,
        *,
        retry_after_s: int | None = None,
        capacity: int | None = None,
        path: str = "/container-reports",
        host: str = DEFAULT_HOST,
        port: int = 0,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        super().__init__(
            path=path, host=host, port=port, clock=clock, wall_clock=wall_clock, sleep=sleep
        )
        if max_connections < 1:
            raise ConfigurationError(f"max_connections must be >= 1, got {max_connections!r}")
        if retry_after_s is not None and retry_after_s < 1:
            raise ConfigurationError(f"retry_after_s must be >= 1 or None, got {retry_after_s!r}")
        if capacity is not None and (
            isinstance(capacity, bool)
            or not isinstance(capacity, int)
            or not 1 <= capacity <= max_connections
        ):
            raise ConfigurationError(
                f"capacity must be an integer within 1..max_connections ({max_connections}) "
                f"or None, got {capacity!r}"
            )
        self.max_connections = max_connections
        self.capacity = capacity
        self._max_in_service = 0
        self.service_s = check_positive("service_s", service_s, allow_zero=True)
        self.retry_after_s = retry_after_s

    def set_service_s(self, service_s: float) -> None:
        """Change the service time of the writes admitted from now on (>= 0, seconds).

        A slow TOS (a batch job, a failover) without a restart: ``set_service_s(20 *
        tos.service_s)`` multiplies its latency; writes already in service keep theirs.
        """
        check_positive("service_s", service_s, allow_zero=True)
        with self._lock:
            previous, self.service_s = self.service_s, service_s
        log.warning("sim_service_time_set", kind=self.kind, service_s=service_s, previous=previous)

    def latency_for(self, in_service: int) -> float:
        """The service time of a call arriving with ``in_service`` calls (itself included)."""
        if self.capacity is None:
            return self.service_s
        return self.service_s * max(1.0, in_service / self.capacity)

    def _admit(self, now: float) -> Verdict:
        if self._admitted_in_flight >= self.max_connections:
            return Verdict(503, retry_after_s=self.retry_after_s, reason="connection_limit")
        in_service = self._admitted_in_flight + 1
        self._max_in_service = max(self._max_in_service, in_service)
        latency = self.latency_for(in_service)
        if self.capacity is None:
            return Verdict(200, service_s=latency)
        extra = {"latency_s": latency, "in_service": in_service}
        return Verdict(200, service_s=latency, extra=extra)

    def _reset_policy(self, now: float) -> None:
        self._max_in_service = self._admitted_in_flight

    def _policy_stats(self, now: float) -> dict[str, Any]:
        return {
            "max_connections": self.max_connections,
            "service_s": self.service_s,
            "capacity": self.capacity,
            "max_in_service_seen": self._max_in_service,
            "busy_share": self._recorder.busy_share(self.max_connections),
        }
