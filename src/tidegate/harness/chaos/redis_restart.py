"""The ``redis-restart`` and ``host-crash`` scenarios: Redis dies mid-burst.

``redis-restart`` SIGKILLs Redis (AOF ``everysec``, the production setting), keeps it
down, and starts it again on the same port and directory; the gate fails closed
meanwhile, and the customs gate is paused across the outage so customs documents are
parked when it dies. ``host-crash`` also cuts the append-only file back to its size
``aof_lost_s`` before, as a machine crash would: delivered marks are lost, and the
ledger must not be believed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tidegate.flow import Gate
from tidegate.harness.chaos.scenario import _Scenario
from tidegate.harness.chaos.verdict import (
    Check,
    _check,
    _events,
    _explain_duplicates,
    _lines,
    _reconciled,
    _reconciled_by_basis,
)
from tidegate.load import ParkingLot
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from pathlib import Path

    from tidegate.harness.chaos.config import ChaosConfig
    from tidegate.harness.scenarios.vessel import RunHandles
    from tidegate.redis_server import EmbeddedRedis

log = get_logger("tidegate.ops")


class _RedisRestart(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None, server: EmbeddedRedis) -> None:
        super().__init__(config, log_dir)
        self.server = server
        self.killed_at: float | None = None
        self.restarted_at: float | None = None
        self.customs_paused = False
        self.parked_when_killed = 0
        self.host_crash = config.kind == "host-crash"
        self.aof_sizes: list[tuple[float, int]] = []
        self.aof_bytes_lost = 0
        self.aof_lost_s = 0.0

    def _kill(self) -> None:
        """SIGKILL Redis; for a host crash, also cut the AOF back ``aof_lost_s`` (at
        least: to the last size sampled that long ago; nothing if there is none)."""
        if not self.host_crash:
            self.server.kill()
            return
        now = time.time()
        cutoff = now - self.config.aof_lost_s
        earlier = [(at, size) for at, size in self.aof_sizes if at <= cutoff]
        if not earlier:
            self.server.kill()
            return
        at, size = earlier[-1]
        self.aof_bytes_lost = self.server.crash(keep_aof_bytes=size)
        self.aof_lost_s = round(now - at, 2)

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        if not self.customs_paused:
            # A customs maintenance window that outlasts the Redis outage: customs
            # documents are parked in Redis when it dies; after it, the movers must bring
            # them back and the gate must pace the whole parked backlog at the rate.
            # The TOS keeps working: its calls are in flight when Redis dies.
            seconds = cfg.fault_at_s + cfg.fault_s + 3.0
            Gate(run.client, "customs", prefix=run.prefix).pause(seconds, "chaos_maintenance")
            self.customs_paused = True
            self.timeline.append({"t": round(t, 2), "event": "customs_gate_paused", "s": seconds})
        if self.killed_at is None and self.host_crash:
            self.aof_sizes.append((time.time(), self.server.aof_size()))
        if self.killed_at is None and t >= cfg.fault_at_s:
            self.parked_when_killed = ParkingLot(run.client, prefix=run.prefix).depth()
            self._kill()
            self.killed_at = time.time()
            event = "redis_host_crashed" if self.host_crash else "redis_killed"
            self.timeline.append({"t": round(t, 2), "event": event})
            log.warning(
                "chaos_redis_killed",
                port=self.server.port,
                aof_bytes_lost=self.aof_bytes_lost,
                aof_lost_s=self.aof_lost_s,
            )
        elif (
            self.restarted_at is None
            and self.killed_at is not None
            and t >= cfg.fault_at_s + cfg.fault_s
        ):
            self.server.start()
            self.restarted_at = time.time()
            self.timeline.append({"t": round(t, 2), "event": "redis_started"})
            log.warning("chaos_redis_started", port=self.server.port)

    def busy(self, t: float) -> bool:
        return self.restarted_at is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        down = (self.killed_at or 0.0, self.restarted_at or 0.0)
        # A call admitted just before the kill may land a little after it.
        grace = 1.0 + self.config.vessel.tos_service_s
        during: dict[str, int] = {}
        for name in ("customs", "tos"):
            timeline = data[f"_{name}"]["request_timeline"]
            during[name] = sum(1 for at, _ in timeline if down[0] + grace <= at < down[1])
        requeued = _events(self.log_dir, {"task_requeued"})
        killed = self.killed_at or 0.0
        lost_from = killed - self.aof_lost_s
        data.update(
            aof_bytes_lost=self.aof_bytes_lost,
            aof_lost_s=self.aof_lost_s,
            accepted_in_lost_window=sum(
                1
                for name in ("customs", "tos")
                for at in data[f"_{name}"]["accept_timeline"]
                if lost_from <= at <= killed
            ),
            reconciled_by_basis=_reconciled_by_basis(self.log_dir),
            reconciled=_reconciled(self.log_dir),
            redis_down_s=round(down[1] - down[0], 2),
            parked_when_redis_died=self.parked_when_killed,
            mover_thread_died=len(_lines(self.log_dir, "Exception in thread tidegate-mover")),
            requests_while_down=during,
            tasks_requeued=len(requeued),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        cfg = self.config
        limit = cfg.vessel.customs_rate + cfg.vessel.customs_burst
        # Accepted in the last second before the kill: the ledger mark either failed
        # (Redis gone) or was lost with the AOF's last second (``everysec``).
        killed = self.killed_at or 0.0
        window = [(None, killed - 1.0 - cfg.vessel.tos_service_s, killed + 1.0)]
        explained, unexplained = _explain_duplicates(chaos, window)
        chaos["duplicates_explained"] = explained
        customs = report["downstreams"]["customs"]
        return [
            *super().checks(report),
            _check(
                "gate_closed_while_redis_down",
                sum(chaos["requests_while_down"].values()) == 0,
                chaos["requests_while_down"],
                0,
                "downstream requests while Redis was down (after a 1 s grace for calls "
                "already admitted)",
            ),
            _check(
                "customs_never_above_limit",
                chaos["customs_max_requests_1s"] <= limit and customs["responses_429"] == 0,
                {
                    "max_requests_1s": chaos["customs_max_requests_1s"],
                    "429": customs["responses_429"],
                },
                f"<= {limit:g} (rate + burst), 0 × 429",
            ),
            _check(
                "parked_messages_survived",
                chaos["parked_when_redis_died"] >= 1 and report["pending"] == 0,
                chaos["parked_when_redis_died"],
                ">= 1, all moved back and delivered",
                "messages parked in Redis (customs maintenance pause) when it was killed",
            ),
            _check(
                "duplicates_only_from_the_restart",
                not unexplained,
                len(unexplained),
                0,
                "keys accepted twice whose first acceptance was not in the second before "
                "Redis died",
            ),
            _check(
                "samples_skipped_not_run",
                report["samples_skipped"] >= 1,
                report["samples_skipped"],
                ">= 1",
                "the demo's sampling loop went on while Redis was away",
            ),
            *self._crash_checks(chaos),
        ]

    def _crash_checks(self, chaos: dict[str, Any]) -> list[Check]:
        if not self.host_crash:
            return []
        return [
            _check(
                "aof_tail_lost",
                chaos["aof_bytes_lost"] > 0 and chaos["aof_lost_s"] >= self.config.aof_lost_s,
                {"bytes": chaos["aof_bytes_lost"], "seconds": chaos["aof_lost_s"]},
                f"> 0 bytes, >= {self.config.aof_lost_s:g} s",
                "the AOF was cut back to its size that long before the kill",
            ),
            _check(
                "deliveries_in_the_lost_second",
                chaos["accepted_in_lost_window"] >= 1,
                chaos["accepted_in_lost_window"],
                ">= 1",
                "documents the downstreams accepted while the lost AOF tail was written: "
                "their ledger marks (and broker pops) are gone",
            ),
        ]
