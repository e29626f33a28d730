"""The adaptive rate controller on the deterministic model, a few schedules × seeds.

``tidegate.sim._model`` replays the customs gateway (token bucket, burst 2, 5 429s in
10 s suspend for 30 s), the fleet's gate and the controller on a virtual clock, with
the delays real processes add: slots handed out 0.4 s ahead, answers reaching the
controller up to 0.3 s after the call, 50 ms of arrival jitter. The fleet's pause is
written when the answer reaches the controller too (the form the tests hold the
controller to); ``--pause-s 0.02`` writes it up to 20 ms after the 429's call went
out, as workers do (``bench/adaptive.py --only variants`` measured 3.7-7.8 ms:
``pause_written_ms``). No Redis, no sleeps:
a run takes milliseconds, so CPU sharing does not matter and the figures are exact for
a commit. The real thing is ``bench/adaptive.py --only variants``.

Per schedule: runs suspended, 429s as a share of accepted calls, utilisation of the
capacity in two settled windows (before the fall, and late after the rise), seconds
to 90 % of the capacity after the rise, seconds to at or under it after the fall.
Ranges are over the seeds (median in brackets).

Run: ``python bench/adaptive_model.py [--seeds 24] [--pause-s report|SECONDS]``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from _harness import md_table
from tidegate.flow.adaptive import RatePolicy
from tidegate.sim._model import ModelRun, run_model

DELAYS = {"admit_lead_s": 0.4, "report_s": 0.3, "jitter_s": 0.05, "burst": 2}


@dataclass(frozen=True)
class Schedule:
    name: str
    capacity: float
    steps: tuple[tuple[float, float], ...]
    seconds: int
    early: tuple[int, int]
    late: tuple[int, int]
    fall_at: int | None = None
    rise_at: int | None = None


SCHEDULES = (
    Schedule("bench: 10 → 4/s at 40 s → 10/s at 60 s", 10.0, ((40, 4.0), (60, 10.0)), 150,
             (15, 40), (75, 150), 40, 60),
    Schedule("25 → 8/s at 40 s → 25/s at 100 s", 25.0, ((40, 8.0), (100, 25.0)), 180,
             (15, 40), (130, 180), 40, 100),
    Schedule("3 → 1.5/s at 40 s → 3/s at 100 s", 3.0, ((40, 1.5), (100, 3.0)), 180,
             (15, 40), (130, 180), 40, 100),
    Schedule("10/s steady", 10.0, (), 300, (15, 40), (40, 300)),
    Schedule("3/s steady", 3.0, (), 300, (15, 40), (40, 300)),
    Schedule("25/s steady", 25.0, (), 300, (15, 40), (40, 300)),
)  # fmt: skip


def _span(values: list[float], fmt: str) -> str:
    return f"{min(values):{fmt}}–{max(values):{fmt}} ({statistics.median(values):{fmt}})"


def _seconds(values: list[float | None]) -> str:
    if not values:
        return "—"
    if any(v is None for v in values):
        return f"never in {sum(v is None for v in values)}"
    known = [v for v in values if v is not None]
    return f"{min(known):.0f}–{max(known):.0f}"


def row(schedule: Schedule, seeds: range, delays: Mapping[str, object]) -> list[object]:
    runs: list[ModelRun] = [
        run_model(
            RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True),
            seconds=schedule.seconds,
            capacity=schedule.capacity,
            schedule=schedule.steps,
            seed=seed,
            **delays,  # type: ignore[arg-type]
        )
        for seed in seeds
    ]
    rise = [r.reach_s(schedule.rise_at) for r in runs] if schedule.rise_at else []
    fall = [r.under_s(schedule.fall_at) for r in runs] if schedule.fall_at else []
    return [
        schedule.name,
        f"{sum(r.suspensions > 0 for r in runs)} of {len(runs)}",
        _span([100 * r.throttled_share() for r in runs], ".2f") + " %",
        _span([r.utilisation(*schedule.early) for r in runs], ".2f"),
        _span([r.utilisation(*schedule.late) for r in runs], ".2f"),
        _seconds(rise),
        _seconds(fall),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--pause-s", default="report")
    args = parser.parse_args(argv)
    delays = {**DELAYS, "pause_s": None if args.pause_s == "report" else float(args.pause_s)}
    columns = [
        "schedule", "runs suspended", "429 share", "settled early", "settled late",
        "90 % after rise (s)", "under after fall (s)",
    ]  # fmt: skip
    print(md_table(columns, [row(s, range(args.seeds), delays) for s in SCHEDULES]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
