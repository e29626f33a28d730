"""A terminal operating system (TOS): a hard cap on requests in flight.

The TOS takes at most ``max_connections`` requests at once; one more is answered 503
straight away. Each accepted request holds its slot for ``service_s`` seconds, so the
sustained capacity is ``max_connections / service_s`` calls per second and a fleet
that opens more connections only collects 503s.
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
        self.max_connections = max_connections
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

    def _admit(self, now: float) -> Verdict:
        if self._admitted_in_flight >= self.max_connections:
            return Verdict(503, retry_after_s=self.retry_after_s, reason="connection_limit")
        return Verdict(200, service_s=self.service_s)

    def _policy_stats(self, now: float) -> dict[str, Any]:
        return {"max_connections": self.max_connections, "service_s": self.service_s}
