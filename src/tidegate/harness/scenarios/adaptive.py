"""The adaptive scenario: the vessel burst against a customs gateway whose capacity
the gate is never told.

The run is the vessel demo's own (:func:`tidegate.harness.scenarios.vessel.run_vessel_demo`: the
same burst, the real worker fleet, the same reconciliation), with two differences. The
customs sim enforces ``customs_rate`` / ``customs_burst`` and dips to ``dip_factor`` of
that rate for ``dip_s`` seconds from ``dip_at_s`` (a maintenance window); and the
workers' customs gate starts at a floor with ``TIDEGATE_CUSTOMS_ADAPTIVE=on``, so the
fleet's elected controller must find the rate from the 429s alone (by default the sim
advertises no quota headers: with them there would be little to learn).

Every figure is computed from the sim's own record (its accept and answer timelines),
not from what the workers believe they did: the gateway's operator counts the same way.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidegate.flow.adaptive import RedisAdaptiveStore
from tidegate.harness.scenarios.vessel import (
    RunHandles,
    Sample,
    Submission,
    VesselConfig,
    run_vessel_demo,
)
from tidegate.keys import Keyspace
from tidegate.sim import QuotaHeaders

__all__ = [
    "AdaptiveDemoConfig",
    "capacity_at",
    "converge_s",
    "converged_utilisation",
    "customs_figures",
    "run_adaptive_demo",
    "schedule",
]

#: The rolling window (s) over which the admitted rate is compared with the capacity,
#: and the step it slides by: one second would count a single late call as a miss.
RATE_WINDOW_S, RATE_STEP_S = 3.0, 0.5
#: A phase's converged share is left out when under this many seconds of it remain
#: (the bench's rule: a few calls would make it a coin toss).
_CONVERGED_MIN_S = 5.0


@dataclass(frozen=True, slots=True)
class AdaptiveDemoConfig:
    """The knobs of the scenario; the customs figures are the sim's *true* capacity."""

    interchanges: int = 1200
    customs_rate: float = 10.0
    customs_burst: int = 3
    workers: int = 2
    seed: int = 7
    dip_at_s: float = 20.0
    dip_s: float = 20.0
    dip_factor: float = 0.4
    #: Where the gate starts, and the box the controller stays in (calls per second).
    floor_rate: float = 1.0
    max_rate: float = 50.0
    timeout_s: float = 600.0
    #: ``"none"``: the sim advertises no quota, the rate is learned from 429s alone;
    #: ``"minute"``: it advertises ``X-RateLimit-Limit-Minute`` and the gate follows it.
    quota_headers: QuotaHeaders = "none"


def schedule(config: AdaptiveDemoConfig) -> tuple[tuple[float, float], ...]:
    """The sim's capacity steps: the dip, then back to the full rate."""
    low = config.customs_rate * config.dip_factor
    return ((config.dip_at_s, low), (config.dip_at_s + config.dip_s, config.customs_rate))


def capacity_at(config: AdaptiveDemoConfig, t: float) -> float:
    """The true capacity ``t`` s after the start (calls per second)."""
    rate = config.customs_rate
    for at_s, step in schedule(config):
        if t >= at_s:
            rate = step
    return rate


def _capacity_area(config: AdaptiveDemoConfig, start: float, end: float) -> float:
    """Calls the true capacity allows between ``start`` and ``end`` (exact, piecewise)."""
    edges = sorted({start, end, *(at for at, _ in schedule(config) if start < at < end)})
    return sum(capacity_at(config, lo) * (hi - lo) for lo, hi in itertools.pairwise(edges))


def _reached_s(
    config: AdaptiveDemoConfig, times: Sequence[float], start: float, end: float
) -> float | None:
    """The end of the first rolling :data:`RATE_WINDOW_S` window within ``[start,
    end]`` whose accepts reach 90 % of the capacity at its middle; ``None`` if none."""
    t = start
    while t + RATE_WINDOW_S <= end:
        count = sum(1 for a in times if t <= a < t + RATE_WINDOW_S)
        if count / RATE_WINDOW_S >= 0.9 * capacity_at(config, t + RATE_WINDOW_S / 2):
            return t + RATE_WINDOW_S
        t += RATE_STEP_S
    return None


def converge_s(config: AdaptiveDemoConfig, accepted: Sequence[float]) -> float | None:
    """Seconds from the start until the admitted rate (accepts in a rolling
    :data:`RATE_WINDOW_S` window) first reaches 90 % of the capacity in force at the
    window's middle; ``None`` if it never does. ``accepted`` are seconds since start."""
    times = sorted(accepted)
    if not times:
        return None
    reached = _reached_s(config, times, 0.0, times[-1] + RATE_STEP_S)
    return None if reached is None else round(reached, 1)


def converged_utilisation(
    config: AdaptiveDemoConfig, accepted: Sequence[float]
) -> dict[str, float | None]:
    """Utilisation *once converged*, the issue's goal (>= 90 %), before the dip and
    after it: from the end of the first rolling window at 90 % of the phase's capacity
    to the phase's end (the last accept, after the dip); ``None`` for a phase that never
    got there, or left under :data:`_CONVERGED_MIN_S` of it. The run's ``utilisation``
    counts the learning and the dip as well, so it stays well under this."""
    times = sorted(accepted)
    drain = times[-1] if times else 0.0
    low_from, low_to = config.dip_at_s, config.dip_at_s + config.dip_s
    figures: dict[str, float | None] = {}
    for name, start, end in (
        ("before_dip", 0.0, min(low_from, drain)),
        ("after_dip", low_to, drain),
    ):
        reached = _reached_s(config, times, start, end)
        if reached is None or end - reached < _CONVERGED_MIN_S:
            figures[name] = None
            continue
        count = sum(1 for a in times if reached <= a <= end)
        figures[name] = round(count / _capacity_area(config, reached, end), 3)
    return figures


def customs_figures(
    config: AdaptiveDemoConfig, record: Mapping[str, Any], origin: float
) -> dict[str, Any]:
    """``downstreams.customs`` from the sim's record (``stats()`` with timelines) and
    the wall instant ``origin`` its schedule started at.

    ``utilisation`` is the calls accepted against those the true capacity allowed from
    the start to the last accept (learning and the dip included: that is the cost).
    """
    accepted = sorted(ts - origin for ts in record.get("accept_timeline", []))
    drain = accepted[-1] if accepted else 0.0
    area = _capacity_area(config, 0.0, drain)
    return {
        "accepted": record["distinct_keys"],
        "duplicates": record["duplicates"],
        "responses_429": record["responses_429"],
        "responses_503": record["responses_503"],
        "suspensions": record["suspensions"],
        "share_429": round(record["responses_429"] / max(1, record["distinct_keys"]), 4),
        "drain_s": round(drain, 3),
        "utilisation": round(len(accepted) / area, 3) if area > 0 else None,
        "converge_s": converge_s(config, accepted),
        "utilisation_converged": converged_utilisation(config, accepted),
        "limit": f"{config.customs_rate:g}/s (hidden)",
        "schedule": [list(step) for step in schedule(config)],
        "max_accepted_1s": record.get("max_accepted_1s"),
    }


class AdaptiveGate:
    """The vessel run's plug-in (:class:`~tidegate.harness.scenarios.vessel.Disturbance`): the
    workers' customs gate adaptive from a floor, the sim's schedule started with the
    burst, the learned rate sampled each period, the sim's record taken at the end."""

    def __init__(self, config: AdaptiveDemoConfig) -> None:
        self.config = config
        self.origin = 0.0
        self.learned: list[tuple[float, float]] = []

    def worker_env(self) -> Mapping[str, str]:
        return {
            "TIDEGATE_CUSTOMS_RATE": repr(self.config.floor_rate),
            "TIDEGATE_CUSTOMS_BURST": "1",
            "TIDEGATE_CUSTOMS_ADAPTIVE": "on",
            "TIDEGATE_CUSTOMS_MIN_RATE": repr(self.config.floor_rate),
            "TIDEGATE_CUSTOMS_MAX_RATE": repr(self.config.max_rate),
            "TIDEGATE_CUSTOMS_SUSPENSION_PRONE": "true",
        }

    def documents(self, burst: list[Submission]) -> list[Submission]:
        return burst

    def started(self, run: RunHandles) -> None:
        # The fleet took seconds to start: the schedule's clock starts with the burst.
        run.customs.reset()
        self.origin = time.time()

    def tick(self, run: RunHandles, t: float) -> None:
        keys = Keyspace(run.prefix).adaptive("customs")
        state = RedisAdaptiveStore(run.client).load(keys).rate
        if state is not None:
            self.learned.append((round(time.time() - self.origin, 2), state.rate))

    def busy(self, t: float) -> bool:
        return False

    def collect(self, run: RunHandles) -> dict[str, Any]:
        return {"record": run.customs.stats()}


def run_adaptive_demo(
    url: str,
    config: AdaptiveDemoConfig,
    *,
    on_sample: Callable[[Sample, int], None] | None = None,
    log_dir: Path | None = None,
) -> tuple[dict[str, Any], list[Sample]]:
    """Run the scenario against Redis at ``url``; return (report, samples).

    The report is the vessel report (reconciliation: ``lost``, ``accepted_twice``…)
    with ``scenario: adaptive``, ``downstreams.customs`` from :func:`customs_figures`
    and ``_adaptive`` (the schedule's origin and the learned rate over time) for the
    plot.
    """
    gate = AdaptiveGate(config)
    vessel = VesselConfig(
        interchanges=config.interchanges,
        customs_rate=config.customs_rate,
        customs_burst=config.customs_burst,
        workers=config.workers,
        seed=config.seed,
        timeout_s=config.timeout_s,
        front_door=False,
        customs_schedule=schedule(config),
        customs_quota_headers=config.quota_headers,
    )
    report, samples = run_vessel_demo(
        url, vessel, on_sample=on_sample, log_dir=log_dir, disturbance=gate
    )
    record = report.pop("chaos")["record"]
    report["scenario"] = "adaptive"
    report["downstreams"]["customs"] = customs_figures(config, record, gate.origin)
    report["config"] = {k: getattr(config, k) for k in config.__dataclass_fields__}
    report["_adaptive"] = {"origin": gate.origin, "learned": gate.learned}
    return report, samples
