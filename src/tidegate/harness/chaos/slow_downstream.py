"""The ``slow-downstream`` scenario: the TOS gets ``slow_factor`` × slower for ``fault_s``.

The TOS pool has more worker processes than TOS connections: the fleet-wide
concurrency leases must hold the cap while every request takes longer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tidegate.harness.chaos.scenario import _Scenario
from tidegate.harness.chaos.verdict import Check, _check, _events
from tidegate.harness.scenarios.vessel import RunHandles, tos_pool

if TYPE_CHECKING:
    from pathlib import Path

    from tidegate.harness.chaos.config import ChaosConfig


class _SlowDownstream(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.slow_from: float | None = None
        self.slow_until: float | None = None

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        if self.slow_from is None and t >= cfg.fault_at_s:
            run.tos_sim.set_service_s(cfg.vessel.tos_service_s * cfg.slow_factor)
            self.slow_from = time.time()
            self.timeline.append({"t": round(t, 2), "event": "tos_slow"})
        elif self.slow_until is None and t >= cfg.fault_at_s + cfg.fault_s:
            run.tos_sim.set_service_s(cfg.vessel.tos_service_s)
            self.slow_until = time.time()
            self.timeline.append({"t": round(t, 2), "event": "tos_normal"})

    def busy(self, t: float) -> bool:
        return self.slow_until is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        start, end = self.slow_from or 0.0, self.slow_until or 0.0
        accepted = [a for a in data["_tos"]["accept_timeline"] if start <= a < end]
        parked = _events(self.log_dir, {"message_parked"})
        data.update(
            slow_s=round(end - start, 2),
            tos_accepted_while_slow=len(accepted),
            tos_rate_while_slow=round(len(accepted) / (end - start), 2) if end > start else 0.0,
            tos_capacity_while_slow=round(
                self.config.vessel.tos_connections
                / (self.config.vessel.tos_service_s * self.config.slow_factor),
                2,
            ),
            tos_parked_for_concurrency=sum(
                1
                for e in parked
                if e.get("reason") == "gate_concurrency" and e.get("task") == "edi.tos.push"
            ),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        cfg = self.config
        tos = report["downstreams"]["tos"]
        return [
            *super().checks(report),
            _check(
                "tos_cap_held",
                chaos["tos_max_concurrent_seen"] <= cfg.vessel.tos_connections
                and tos["responses_503"] == 0,
                {"max_concurrent": chaos["tos_max_concurrent_seen"], "503": tos["responses_503"]},
                f"<= {cfg.vessel.tos_connections}, 0 × 503",
                f"{tos_pool(cfg.vessel).workers} TOS processes, gate concurrency "
                f"{cfg.vessel.tos_connections}",
            ),
            _check(
                "no_message_past_visibility",
                chaos["max_unacked_age_s"] < cfg.timing.visibility_timeout_s,
                chaos["max_unacked_age_s"],
                cfg.timing.visibility_timeout_s,
                "oldest unacknowledged message seen (s)",
            ),
        ]
