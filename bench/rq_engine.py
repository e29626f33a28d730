"""RQ engine throughput: a work horse forked per job against jobs run in-process.

The same vessel burst (``tidegate.harness.scenarios.rq_vessel.run_rq_vessel_demo``) through the
same fleet (2 customs + 4 TOS ``rq worker`` processes), once with tidegate's forking
``JsonWorker`` and once with ``InProcessJsonWorker``, in pairs, alternating, in one
session, so the machine's load is shared alike. The downstreams are made wide (customs
1,000/s burst 100, TOS 32 connections × 5 ms) so that the workers, not the gate, set
the pace: jobs/s = jobs delivered / (last accept - submission), from the sims' own
timelines. Each run is reconciled per key (lost and accepted twice must be 0).

Run: ``python bench/rq_engine.py [--interchanges N] [--pairs P] [--out PATH]``.
Redis: ``REDIS_URL`` or an embedded ``redis-server``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from tidegate.harness.scenarios.rq_vessel import run_rq_vessel_demo
from tidegate.harness.scenarios.vessel import VesselConfig
from tidegate.redis_server import redis_url

MODES = ("fork", "in-process")


def one_run(url: str, worker: str, interchanges: int) -> dict[str, Any]:
    config = VesselConfig(
        interchanges=interchanges,
        customs_rate=1000,
        customs_burst=100,
        tos_connections=32,
        tos_service_s=0.005,
        timeout_s=900,
    )
    report, _ = run_rq_vessel_demo(url, config, worker=worker)
    timelines = report.pop("_timelines")
    accepts = [t for name in ("customs", "tos") for t in timelines[name]]
    last = max(accepts) - timelines["t0"] if accepts else float("nan")
    return {
        "worker": worker,
        "delivered": report["delivered"],
        "lost": report["lost"],
        "accepted_twice": report["accepted_twice"],
        "drain_s": round(last, 3),
        "jobs_per_s": round(report["delivered"] / last, 2),
        "peak_worker_rss_mb": report["peak_worker_rss_mb"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interchanges", type=int, default=600)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results/rq-engine.json"))
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with redis_url() as url:
        for pair in range(args.pairs):
            for worker in MODES if pair % 2 == 0 else reversed(MODES):
                run = one_run(url, worker, args.interchanges)
                run["pair"] = pair
                runs.append(run)
                print(json.dumps(run), flush=True)
    rates = {m: [r["jobs_per_s"] for r in runs if r["worker"] == m] for m in MODES}
    ratios = [
        inproc / fork for fork, inproc in zip(rates["fork"], rates["in-process"], strict=True)
    ]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    result = {
        "command": f"python bench/rq_engine.py --interchanges {args.interchanges} "
        f"--pairs {args.pairs}",
        "commit": commit,
        "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared with other sessions)",
        "runs": runs,
        "in_process_over_fork": [round(r, 2) for r in ratios],
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"in_process_over_fork": result["in_process_over_fork"]}))


if __name__ == "__main__":
    main()
