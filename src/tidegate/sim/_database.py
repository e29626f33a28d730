"""A shared database that slows down as concurrent writers pile up.

Nothing is ever refused: each write just takes ``base_latency_s + per_writer_s ×
(writers − 1)``, where ``writers`` counts the writes in service when it arrives, itself
included. Throughput stops growing with concurrency while latency keeps growing —
write amplification, the failure a concurrency cap prevents.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tidegate.sim._base import DEFAULT_HOST, Clock, SimServer, Verdict, check_positive

__all__ = ["DatabaseSim"]


class DatabaseSim(SimServer):
    """The database: latency grows linearly with concurrent writers.

    Args:
        base_latency_s: the latency of a lone writer, in seconds (>= 0).
        per_writer_s: the latency each additional concurrent writer adds (>= 0).
        path: the write path.
        host, port, clock, wall_clock, sleep: see :class:`~tidegate.sim.SimServer`.

    The accepted answer carries ``latency_s`` and ``writers`` so a caller can plot them.
    """

    kind = "database"

    def __init__(
        self,
        base_latency_s: float = 0.005,
        per_writer_s: float = 0.005,
        *,
        path: str = "/writes",
        host: str = DEFAULT_HOST,
        port: int = 0,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        super().__init__(
            path=path, host=host, port=port, clock=clock, wall_clock=wall_clock, sleep=sleep
        )
        self.base_latency_s = check_positive("base_latency_s", base_latency_s, allow_zero=True)
        self.per_writer_s = check_positive("per_writer_s", per_writer_s, allow_zero=True)
        self._max_writers = 0

    def latency_for(self, writers: int) -> float:
        """The latency of a write arriving when ``writers`` (itself included) are in service."""
        return self.base_latency_s + self.per_writer_s * max(0, writers - 1)

    def _admit(self, now: float) -> Verdict:
        writers = self._admitted_in_flight + 1
        self._max_writers = max(self._max_writers, writers)
        latency = self.latency_for(writers)
        return Verdict(200, service_s=latency, extra={"latency_s": latency, "writers": writers})

    def _reset_policy(self, now: float) -> None:
        self._max_writers = self._admitted_in_flight

    def _policy_stats(self, now: float) -> dict[str, Any]:
        return {
            "base_latency_s": self.base_latency_s,
            "per_writer_s": self.per_writer_s,
            "max_writers_seen": self._max_writers,
        }
