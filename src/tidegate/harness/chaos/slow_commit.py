"""The ``slow-commit`` scenario: TOS requests that outlive their task, and still commit.

From ``fault_at_s`` a few TOS requests (``stragglers``) take 4 s longer than the
workers' soft time limit: the task gives up, the TOS commits at the end of the request.
The workers know the TOS's ``max_request_s`` (``TIDEGATE_TOS_MAX_REQUEST_S``): no lookup,
no resend before it.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from tidegate.harness.chaos.scenario import _Scenario
from tidegate.harness.chaos.verdict import Check, _check, _events, _reconciled, _reconciled_by_basis

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from tidegate.harness.chaos.config import ChaosConfig
    from tidegate.harness.scenarios.vessel import RunHandles


class _SlowCommit(_Scenario):
    """The TOS commits at the end of each request; a few requests take 4 s longer than
    the task's soft time limit, so the task gives up first — and its retry, after the
    usual backoff of a second or so, would find nothing yet while the other TOS
    connections take the resend."""

    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.slow_service_s = config.timing.soft_time_limit_s + 4.0
        # What the TOS may take to finish a request it received, as its operator says.
        self.max_request_s = self.slow_service_s + 2.0
        self.slow_from: float | None = None

    def worker_env(self) -> Mapping[str, str]:
        return {**super().worker_env(), "TIDEGATE_TOS_MAX_REQUEST_S": repr(self.max_request_s)}

    def started(self, run: RunHandles) -> None:
        run.tos_sim.set_commit_at_end()

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        if self.slow_from is None and t >= cfg.fault_at_s:
            run.tos_sim.set_stragglers(self.slow_service_s, count=cfg.stragglers, every=5)
            self.slow_from = time.time()
            self.timeline.append({"t": round(t, 2), "event": "tos_stragglers"})

    def busy(self, t: float) -> bool:
        return self.slow_from is None or time.time() < self.slow_from + self.max_request_s

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        parked = _events(self.log_dir, {"message_parked"})
        waits = [e for e in parked if e.get("reason") == "awaiting_downstream_commit"]
        given_up = [
            e
            for e in _events(self.log_dir, {"delivery_awaiting_commit"})
            if e.get("downstream") == "tos"
        ]
        data.update(
            slow_service_s=self.slow_service_s,
            max_request_s=self.max_request_s,
            tos_calls_given_up=len(given_up),
            given_up_by_error=dict(Counter(str(e.get("error")) for e in given_up)),
            parked_awaiting_commit=len(waits),
            reconciled_by_basis=_reconciled_by_basis(self.log_dir),
            reconciled=_reconciled(self.log_dir),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        return [
            *super().checks(report),
            _check(
                "calls_outlived_the_task",
                chaos["tos_calls_given_up"] >= 1,
                chaos["tos_calls_given_up"],
                ">= 1",
                f"TOS calls given up at the soft time limit while the TOS, taking "
                f"{chaos['slow_service_s']:g} s, committed them at the end; each parked "
                f"until max_request_s ({chaos['max_request_s']:g} s) after it started",
            ),
            _check(
                "late_commits_found_by_lookup",
                chaos["reconciled"].get("accepted_before", 0) >= 1,
                chaos["reconciled"],
                "accepted_before >= 1",
                "units whose lookup, asked after max_request_s, found the late commit",
            ),
        ]
