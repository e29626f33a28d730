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

``--sweep`` runs the bench's schedule (a dip to 40 % from 40 to 60 s) at capacities
around and above 10/s instead: the controller's maths were tuned at 10/s, and where the
bisection's levels land against the capacity (a ceiling 1 % over it runs clean for
20 s against a bucket's burst of 2) decides much of what a run costs.

``--tick-s`` and ``--tick-jitter-s`` space the controller's ticks as a real one's drift
(1.0025-1.003 s apart on the bench's runs) instead of exact seconds. ``--wake-on-429``
(``on`` by default, as the live loop does since it waits on the window's 429 token)
lets a 429's report wake the controller at once; ``off`` is the tick-only loop of
before. ``--ticks`` runs every schedule and the sweep over four tick spacings, both
ways, side by side.

Run: ``python bench/adaptive_model.py [--seeds 24] [--pause-s report|SECONDS] [--sweep]
[--tick-s 1.003] [--tick-jitter-s 0.005] [--wake-on-429 on|off] [--ticks]``.
"""

from __future__ import annotations

import argparse
import math
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


def _runs(
    capacity: float,
    steps: tuple[tuple[float, float], ...],
    seconds: int,
    seeds: range,
    delays: Mapping[str, object],
) -> list[ModelRun]:
    """One model run per seed of the controller's default suspension-prone box."""
    return [
        run_model(
            RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True),
            seconds=seconds,
            capacity=capacity,
            schedule=steps,
            seed=seed,
            **delays,  # type: ignore[arg-type]
        )
        for seed in seeds
    ]


def row(schedule: Schedule, seeds: range, delays: Mapping[str, object]) -> list[object]:
    runs = _runs(schedule.capacity, schedule.steps, schedule.seconds, seeds, delays)
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


SWEEP = (8.7, 9.2, 9.5, 9.85, 10.0, 10.3, 10.7, 11.3, 12.0, 15.0, 20.0, 25.0)


def sweep_schedule(capacity: float) -> Schedule:
    """The bench's schedule (40 % of the capacity from 40 to 60 s) at another capacity."""
    steps = ((40.0, 0.4 * capacity), (60.0, capacity))
    return Schedule(f"sweep {capacity:g}/s", capacity, steps, 150, (15, 40), (75, 150), 40, 60)


def sweep_row(capacity: float, seeds: range, delays: Mapping[str, object]) -> list[object]:
    sweep = sweep_schedule(capacity)
    runs = _runs(sweep.capacity, sweep.steps, sweep.seconds, seeds, delays)
    rise = [r.reach_s(60) for r in runs]
    return [
        f"{capacity:g}/s",
        f"{sum(r.suspensions > 0 for r in runs)} of {len(runs)}",
        _span([100 * r.throttled_share() for r in runs], ".2f") + " %",
        _span([r.utilisation(*sweep.early) for r in runs], ".2f"),
        _span([r.utilisation(*sweep.late) for r in runs], ".2f"),
        _seconds(rise),
        str(sum(v is None or v > 30 for v in rise)),
    ]


#: Tick spacings for ``--ticks`` as (tick_s, tick_jitter_s): exact seconds, and the
#: drift of a real controller's loop (a tick plus its own run time: 1.0025-1.003 s apart
#: on the bench's runs), and more.
TICKS = ((1.0, 0.0), (1.0, 0.006), (1.003, 0.01), (1.01, 0.02))


def ticks_row(schedule: Schedule, seeds: range, delays: Mapping[str, object]) -> list[object]:
    """One schedule over every spacing in :data:`TICKS`, the controller woken by a 429
    (the live loop) and not: runs suspended, runs over 30 s to 90 % after the rise,
    median 429 share, median late utilisation, the slowest return under a fall."""
    rise_at, fall_at = schedule.rise_at, schedule.fall_at
    cells: list[object] = [schedule.name]
    for wake in (False, True):
        runs = [
            run
            for tick_s, jitter_s in TICKS
            for run in _runs(
                schedule.capacity,
                schedule.steps,
                schedule.seconds,
                seeds,
                {**delays, "tick_s": tick_s, "tick_jitter_s": jitter_s, "wake_on_429": wake},
            )
        ]
        slow = sum((r.reach_s(rise_at) or math.inf) > 30 for r in runs) if rise_at else 0
        under = [r.under_s(fall_at) for r in runs] if fall_at else []
        cells += [
            f"{sum(r.suspensions > 0 for r in runs)} of {len(runs)}",
            str(slow) if rise_at else "—",
            f"{100 * statistics.median(r.throttled_share() for r in runs):.2f} %",
            f"{statistics.median(r.utilisation(*schedule.late) for r in runs):.3f}",
            (f"{max(v or math.inf for v in under):.0f}" if under else "—"),
        ]
    return cells


def ticks_table(seeds: range, delays: Mapping[str, object]) -> str:
    # The sweep's 10/s is the bench's own schedule, already among SCHEDULES.
    schedules = [*SCHEDULES, *(sweep_schedule(c) for c in SWEEP if c != 10.0)]
    head = ["schedule"] + [
        f"{column} ({side})"
        for side in ("tick only", "woken by a 429")
        for column in ("suspended", "> 30 s to 90 %", "429 share", "late use", "under (s)")
    ]
    return md_table(head, [ticks_row(s, seeds, delays) for s in schedules])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--pause-s", default="report")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--tick-s", type=float, default=1.0)
    parser.add_argument("--tick-jitter-s", type=float, default=0.0)
    parser.add_argument("--wake-on-429", choices=["on", "off"], default="on")
    parser.add_argument("--ticks", action="store_true")
    args = parser.parse_args(argv)
    delays = {
        **DELAYS,
        "pause_s": None if args.pause_s == "report" else float(args.pause_s),
        "tick_s": args.tick_s,
        "tick_jitter_s": args.tick_jitter_s,
        "wake_on_429": args.wake_on_429 == "on",
    }
    if args.ticks:
        print(ticks_table(range(args.seeds), delays))
        return 0
    if args.sweep:
        head = [
            "capacity (40 % from 40 to 60 s)", "runs suspended", "429 share",
            "settled 15-40 s", "settled 75-150 s", "90 % after rise (s)", "of which > 30 s",
        ]  # fmt: skip
        print(md_table(head, [sweep_row(c, range(args.seeds), delays) for c in SWEEP]))
        return 0
    columns = [
        "schedule", "runs suspended", "429 share", "settled early", "settled late",
        "90 % after rise (s)", "under after fall (s)",
    ]  # fmt: skip
    print(md_table(columns, [row(s, range(args.seeds), delays) for s in SCHEDULES]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
