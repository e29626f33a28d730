"""Worker memory against the size of the burst: the vessel demo at several sizes.

    .venv/bin/python bench/memory.py [--sizes 2000,20000,50000] [--out bench/results/memory.json]

Runs the vessel burst (real Celery workers, real sims) at each size with the simulated
downstreams opened wide (customs 400/s, TOS 24 connections × 5 ms) so that even 50,000
interchanges drain in minutes, and records per pool, from the operating system's own
accounting (psutil RSS, every half second):

- the peak RSS of the worker main process and of the largest pool child;
- the RSS of the children present at the first look and of those first seen in the last
  tenth of the run (a child is forked from the main process as it is then: a grown
  parent gives grown children);
- the peak RSS of the whole fleet.

The promise under test: prefetch 1 + acks_late keep the backlog in the broker, so none
of these figures may grow with the number of interchanges.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from _harness import CpuWatch, describe_interference, machine_info, md_table, write_json
from tidegate.harness.celery_fleet import PoolMemory
from tidegate.harness.scenarios.vessel import RunHandles, Submission, VesselConfig, run_vessel_demo
from tidegate.redis_server import redis_url

# The pools are fixed at the sizes of the first runs (customs 2, TOS 4): left to the
# demo's sizing, a TOS of 24 connections x 5 ms would get a pool of about 120 processes
# (enough to keep every connection busy through each call's bookkeeping), 8.6 GB of
# workers whatever the burst, and the figures would not compare with the earlier runs.
BASE = VesselConfig(
    customs_rate=400.0,
    customs_burst=40,
    tos_connections=24,
    tos_service_s=0.005,
    workers=2,
    tos_workers=4,
    timeout_s=3600.0,
)


class MemoryWatch:
    """A :class:`~tidegate.harness.scenarios.vessel.Disturbance` that only looks (RSS)."""

    def __init__(self) -> None:
        self.main_peak: dict[str, float] = {}
        self.child_peak: dict[str, dict[int, float]] = {}
        self.first_seen: dict[str, dict[int, float]] = {}
        self.first_t: float | None = None
        self.last_t = 0.0

    def worker_env(self) -> Mapping[str, str]:
        return {}

    def documents(self, burst: list[Submission]) -> list[Submission]:
        return burst

    def started(self, run: RunHandles) -> None:
        pass

    def tick(self, run: RunHandles, t: float) -> None:
        self.first_t = t if self.first_t is None else self.first_t
        self.last_t = t
        for pool, usage in run.fleet.rss_by_process().items():
            self._note(pool, usage, t)

    def _note(self, pool: str, usage: PoolMemory, t: float) -> None:
        self.main_peak[pool] = max(self.main_peak.get(pool, 0.0), usage.main_mb)
        peaks = self.child_peak.setdefault(pool, {})
        seen = self.first_seen.setdefault(pool, {})
        for pid, mb in usage.children_mb.items():
            peaks[pid] = max(peaks.get(pid, 0.0), mb)
            seen.setdefault(pid, t)

    def busy(self, t: float) -> bool:
        return False

    def collect(self, run: RunHandles) -> dict[str, Any]:
        pools: dict[str, Any] = {}
        for pool, peaks in self.child_peak.items():
            seen = self.first_seen[pool]
            first = [mb for pid, mb in peaks.items() if seen[pid] == self.first_t]
            late = [mb for pid, mb in peaks.items() if seen[pid] >= 0.9 * self.last_t]
            pools[pool] = {
                "main_peak_mb": round(self.main_peak.get(pool, 0.0), 1),
                "child_peak_mb": round(max(peaks.values(), default=0.0), 1),
                "children_seen": len(peaks),
                "early_child_mb": round(max(first), 1) if first else None,
                "late_child_mb": round(max(late), 1) if late else None,
            }
        return pools


def run_size(url: str, size: int) -> dict[str, Any]:
    watch = MemoryWatch()
    cpu = CpuWatch()
    started = time.perf_counter()
    report, _ = run_vessel_demo(url, replace(BASE, interchanges=size), disturbance=watch)
    return {
        "interchanges": size,
        "delivered": report["delivered"],
        "lost": report["lost"],
        "duplicates": report["duplicates"],
        "elapsed_s": report["elapsed_s"],
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_worker_rss_mb": report["peak_worker_rss_mb"],
        "pools": report["chaos"],
        "interference": describe_interference(cpu.stop()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,50000")
    parser.add_argument("--out", default="bench/results/memory.json")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = []
    with redis_url() as url:
        for size in sizes:
            run = run_size(url, size)
            print(json.dumps(run), flush=True)
            runs.append(run)
    base = runs[0]
    rows = []
    for run in runs:
        for pool, figures in run["pools"].items():
            ref = base["pools"][pool]
            rows.append(
                [
                    f"{run['interchanges']:,}",
                    pool,
                    f"{figures['main_peak_mb']} "
                    f"({figures['main_peak_mb'] / ref['main_peak_mb']:.3f})",
                    f"{figures['child_peak_mb']} "
                    f"({figures['child_peak_mb'] / ref['child_peak_mb']:.3f})",
                    str(figures["early_child_mb"]),
                    str(figures["late_child_mb"]),
                    str(figures["children_seen"]),
                ]
            )
        rows.append(
            [
                f"{run['interchanges']:,}",
                "all",
                f"total {run['peak_worker_rss_mb']} "
                f"({run['peak_worker_rss_mb'] / base['peak_worker_rss_mb']:.3f})",
                f"lost {run['lost']}, dup {run['duplicates']}",
                f"{run['elapsed_s']} s",
                run["interference"],
                "",
            ]
        )
    print(
        md_table(
            [
                "interchanges",
                "pool",
                "main peak MiB (× first size)",
                "child peak MiB (×)",
                "early child",
                "late child",
                "children",
            ],
            rows,
        )
    )
    write_json(args.out, {"machine": machine_info(), "base": repr(BASE), "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
