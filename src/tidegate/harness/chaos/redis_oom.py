"""The ``redis-oom`` chaos scenario: Redis refuses every write for ``fault_s`` mid-burst.

The issue's incident (#13, item 3): with ``maxmemory`` and ``noeviction``, memory full
for 25 s; worker main processes exited on ``OutOfMemoryError``, documents stayed queued
for good, one message left the broker for good, a healthy document was dead-lettered.
Here the scenario's own Redis (which holds the broker, the gates, the ledger, the DLQ
and the parking lot) gets ``maxmemory-policy noeviction`` and a ``maxmemory`` below what
it already uses, so every command that may grow memory is refused with the ``OOM``
reply a full Redis gives; after ``fault_s`` the limit is lifted. Setting the limit rather
than filling memory makes the window exact: a fill is undone by the first ack that
frees a few bytes.

On top of the shared invariant (nothing lost, no key accepted twice, no healthy
document dead-lettered), the scenario checks that writes really were refused the whole
window (a probe write every tick) and that every worker main process outlived it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis

from tidegate.harness.chaos.config import ChaosConfig
from tidegate.harness.chaos.scenario import _Scenario
from tidegate.harness.chaos.verdict import Check, _check, _events, _lines
from tidegate.harness.scenarios.vessel import RunHandles
from tidegate.logging import get_logger
from tidegate.redis_server import EmbeddedRedis

__all__ = ["RedisOom"]

log = get_logger("tidegate.ops")

#: The probe key the scenario writes every tick while Redis is full.
_PROBE = "chaos:oom-probe"


class RedisOom(_Scenario):
    """See the module docstring."""

    def __init__(self, config: ChaosConfig, log_dir: Path | None, server: EmbeddedRedis) -> None:
        super().__init__(config, log_dir)
        self.server = server
        self.full_at: float | None = None
        self.freed_at: float | None = None
        self.maxmemory_before = "0"
        self.probes_refused = 0
        self.probes_accepted = 0
        self.mains_before: dict[str, int] = {}

    def started(self, run: RunHandles) -> None:
        self.mains_before = run.fleet.main_pids()

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        if self.full_at is None and t >= cfg.fault_at_s:
            self.maxmemory_before = str(run.client.config_get("maxmemory")["maxmemory"])
            run.client.config_set("maxmemory-policy", "noeviction")
            run.client.config_set("maxmemory", 1)  # below any used memory: all writes refused
            self.full_at = time.time()
            self.timeline.append({"t": round(t, 2), "event": "redis_full"})
            log.warning("chaos_redis_full", port=self.server.port, for_s=cfg.fault_s)
        elif self.full_at is not None and self.freed_at is None:
            if time.time() >= self.full_at + cfg.fault_s:  # the full window, however late it began
                run.client.config_set("maxmemory", self.maxmemory_before)
                self.freed_at = time.time()
                self.timeline.append({"t": round(t, 2), "event": "redis_freed"})
                log.warning("chaos_redis_freed", port=self.server.port)
                return
            try:
                run.client.set(_PROBE, "x")
            except redis.exceptions.OutOfMemoryError:
                self.probes_refused += 1
            else:
                self.probes_accepted += 1

    def busy(self, t: float) -> bool:
        return self.freed_at is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        start, end = self.full_at or 0.0, self.freed_at or 0.0
        accepted_while_full = sum(
            1
            for name in ("customs", "tos")
            for at in data[f"_{name}"]["accept_timeline"]
            if start + 1.0 <= at < end
        )
        data.update(
            full_s=round(end - start, 2),
            probe_writes_refused=self.probes_refused,
            probe_writes_accepted=self.probes_accepted,
            accepted_while_full=accepted_while_full,
            broker_writes_deferred=len(_events(self.log_dir, {"broker_write_deferred"})),
            worker_mains_before=self.mains_before,
            worker_mains_after=run.fleet.main_pids(),
            unrecoverable_errors=len(_lines(self.log_dir, "Unrecoverable error")),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        return [
            *super().checks(report),
            _check(
                "redis_refused_writes",
                chaos["probe_writes_refused"] >= 1 and chaos["probe_writes_accepted"] == 0,
                {
                    "refused": chaos["probe_writes_refused"],
                    "accepted": chaos["probe_writes_accepted"],
                },
                ">= 1 refused, 0 accepted",
                f"a probe write every tick for the {chaos['full_s']} s Redis was full",
            ),
            _check(
                "full_for_the_whole_window",
                chaos["full_s"] >= self.config.fault_s,
                chaos["full_s"],
                f">= {self.config.fault_s:g} s",
            ),
            _check(
                "worker_mains_survived",
                chaos["worker_mains_before"] == chaos["worker_mains_after"]
                and chaos["unrecoverable_errors"] == 0,
                {
                    "before": chaos["worker_mains_before"],
                    "after": chaos["worker_mains_after"],
                    "unrecoverable": chaos["unrecoverable_errors"],
                },
                "the same pids, no 'Unrecoverable error'",
                "worker main processes outlive a full Redis (they wait, then resume)",
            ),
        ]
