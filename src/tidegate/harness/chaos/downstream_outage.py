"""The ``downstream-outage`` scenario: the customs gateway answers 503, then refuses
connections, for ``fault_s``.

Customs documents are parked with backoff and come back; none may be dead-lettered
before both its attempts and the retry horizon are spent
(:mod:`~tidegate.harness.chaos.horizon`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from tidegate.delivery import RetryPolicy
from tidegate.harness.chaos.horizon import horizon_shorter_than, retry_horizon
from tidegate.harness.chaos.scenario import _Scenario
from tidegate.harness.chaos.verdict import Check, _check, _events

if TYPE_CHECKING:
    from pathlib import Path

    from tidegate.harness.chaos.config import ChaosConfig
    from tidegate.harness.scenarios.vessel import RunHandles


class _DownstreamOutage(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.phases: list[tuple[str, float, float]] = []
        self.backlog_at_start: int | None = None

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        half = cfg.fault_s / 2
        if not self.phases and t >= cfg.fault_at_s and self._due(run):
            self.backlog_at_start = self._customs_backlog(run)
            run.customs.set_outage(half, mode="503")
            now = time.time()
            self.phases.append(("503", now, now + half))
            self.timeline.append({"t": round(t, 2), "event": "customs_503"})
        elif len(self.phases) == 1 and time.time() >= self.phases[0][2]:
            run.customs.set_outage(half, mode="refuse")
            now = time.time()
            self.phases.append(("refuse", now, now + half))
            self.timeline.append({"t": round(t, 2), "event": "customs_refuse"})

    def _due(self, run: RunHandles) -> bool:
        limit = self.config.outage_backlog
        return limit is None or self._customs_backlog(run) <= limit

    def _customs_backlog(self, run: RunHandles) -> int:
        customs_docs = sum(1 for s in run.submissions if s.queue == "edi.customs")
        return customs_docs - int(run.customs.stats(timeline=False)["distinct_keys"])

    def busy(self, t: float) -> bool:
        return len(self.phases) < 2 or time.time() < self.phases[1][2]

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        start, end = self.phases[0][1], self.phases[-1][2]
        failures = [
            e
            for e in _events(self.log_dir, {"downstream_unavailable"})
            if e.get("downstream") == "customs" and start <= e["t"] <= end + 0.5
        ]
        sim_503 = sum(
            1
            for at, status in data["_customs"]["request_timeline"]
            if status == 503 and start <= at <= end
        )
        per_key = Counter(str(e.get("key_hash")) for e in failures)
        data.update(
            outage_s=round(end - start, 2),
            phases=[{"mode": m, "start": s, "end": e} for m, s, e in self.phases],
            backlog_at_start=self.backlog_at_start,
            calls_in_outage=len(failures),
            calls_per_s_in_outage=round(len(failures) / (end - start), 2),
            calls_in_outage_503_seen_by_sim=sim_503,
            calls_in_outage_refused=sum(
                1 for e in failures if "Connect" in str(e.get("error", ""))
            ),
            documents_tried_in_outage=len(per_key),
            max_calls_per_document=max(per_key.values(), default=0),
            horizon=retry_horizon().as_dict(),
            p_horizon_shorter_than_outage=horizon_shorter_than(end - start),
            exhausted=sum(
                1 for d in data["dead_letters"] if str(d["reason"]).startswith("retries exhausted")
            ),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        cfg = self.config
        policy = RetryPolicy()
        gate_burst = max(1, cfg.vessel.customs_burst - 2)
        gate_bound = (
            math.floor(cfg.vessel.customs_rate * chaos["outage_s"])
            + gate_burst
            + cfg.vessel.workers
        )
        # Up to max_attempts on the backoff ramp, then one probe per cap/2 at most.
        probes = math.ceil(chaos["outage_s"] / (policy.backoff_cap_s / 2))
        policy_bound = chaos["documents_tried_in_outage"] * (policy.max_attempts + probes)
        return [
            *super().checks(report),
            _check(
                "no_retry_storm",
                chaos["calls_in_outage"] <= min(gate_bound, policy_bound),
                chaos["calls_in_outage"],
                {"gate": gate_bound, "backoff": policy_bound},
                "customs calls during the outage ≤ min(rate × T + burst + in-flight, "
                "documents tried × (max_attempts + T / (cap/2)))",
            ),
            _check(
                "sim_saw_the_503_phase",
                chaos["calls_in_outage_503_seen_by_sim"] <= chaos["calls_in_outage"],
                chaos["calls_in_outage_503_seen_by_sim"],
                chaos["calls_in_outage"],
                "503s in the sim's request timeline vs failures the workers logged",
            ),
            _check(
                "no_dead_letter_from_outage",
                chaos["exhausted"] == 0,
                chaos["exhausted"],
                0,
                f"outage {chaos['outage_s']} s; policy horizon mean "
                f"{chaos['horizon']['mean_s']} s, P(horizon < outage) = "
                f"{chaos['p_horizon_shorter_than_outage']}",
            ),
            _check("customs_no_429", report["downstreams"]["customs"]["responses_429"] == 0, 0),
        ]
