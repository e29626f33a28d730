"""Bulk path throughput: one IFCSUM of N B/Ls through dispatch → parse → aggregate.

    python bench/bulk.py [--bls 1000,20000,100000] [--workers 4] [--reps 1]
                         [--out bench/results/bulk.json]

Runs `tidegate.harness.scenarios.bulk` (real Celery workers, a simulated TOS) without poison and
reports, per rep: B/L units per second from the dispatch message to the aggregate's
summary (`aggregate_s`), to the last B/L accepted by the TOS (`fan_out_s`), and the
peak RSS of the pool that runs dispatch and parse (main process + children).

B/L units/s is the issue's figure: B/Ls over the wall time from just before the manifest
is stored and its dispatch message sent to the moment the aggregate has published its last
forward (its summary's `aggregated_at`) — carving, the parse fan-out and the aggregate,
not the TOS. Two steady-state rates go next to it, read from the batch's keys every
0.2 s: outcomes recorded per second between 20 % and 80 % of the B/Ls (the parse step,
without the dispatch's start and the last stragglers), and the same for the aggregate's
forwards. The aggregate of a small batch runs before the TOS pool is busy; that of a
large one runs while the TOS pool forwards its first pages on the same CPUs. Each size
also records the CPU other processes used meanwhile (`cpu_watch`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

from _harness import CpuWatch, describe_interference
from bulk_profile import BatchProgress
from tidegate._redis import client_from_url
from tidegate.harness.scenarios.bulk import BulkConfig, run_bulk_demo
from tidegate.redis_server import find_redis_server, redis_url


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    server = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True, check=False
    ).stdout.split()[2]
    return (
        f"{os.cpu_count()} vCPU {cpu}, Python {platform.python_version()}, redis-server "
        f"{server}, {time.strftime('%Y-%m-%d')}"
    )


#: Seconds between samples: a 1,000-B/L run's middle 60 % lasts about a second.
SAMPLE_S = 0.2


class RunCpuWatch(CpuWatch):
    """:class:`CpuWatch` that also counts the run's exited processes as its own.

    The fleet is stopped before the watch is read: its workers' CPU (and their pool
    children's, recycled ones included) is then in this process's reaped-children
    times, which the base class leaves out — it would report it as other sessions'.
    """

    def _ours(self) -> float:
        t = self._me.cpu_times()
        return super()._ours() + t.children_user + t.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bls", default="5000", help="B/Ls per manifest; a comma list runs each")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sizes = [int(n) for n in args.bls.split(",")]
    runs = []
    with redis_url() as url:
        for bls in sizes:
            for rep in range(args.reps):
                config = BulkConfig(
                    bls=bls,
                    poison_every=0,
                    workers=args.workers,
                    seed=100 + rep,
                    tos_connections=8,
                    tos_service_s=0.002,
                    timeout_s=3600.0,
                )
                watch = RunCpuWatch()
                progress = BatchProgress(client_from_url(url))
                report, _ = run_bulk_demo(
                    url, config, on_sample=progress.on_sample, interval_s=SAMPLE_S
                )
                report["cpu_watch"] = watch.stop()
                report["parse_mid_per_s"] = progress.mid_rate("parsed", bls)
                report["forward_mid_per_s"] = progress.mid_rate("forwarded", bls)
                runs.append(report)
                print(
                    f"{bls} B/Ls, rep {rep}: aggregate {report['aggregate_s']} s, "
                    f"TOS {report['fan_out_s']} s, lost {report['lost']}, "
                    f"duplicates {report['duplicates']}, RSS {report['peak_worker_rss_mb']}; "
                    f"{describe_interference(report['cpu_watch'])}",
                    flush=True,
                )
    print(f"\nmachine: {machine()}")
    print(
        f"command: python bench/bulk.py --bls {args.bls} --workers {args.workers} "
        f"--reps {args.reps}\n"
    )
    print(
        "| B/Ls | dispatch → aggregate | B/L units/s (× first size) | parse, middle 60 % "
        "(× first size) | aggregate's forwards, middle 60 % | → all at TOS "
        "| B/Ls/s end to end | peak RSS bulk pool (× first size) | lost | duplicates |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    base_rate = base_rss = base_mid = 0.0
    for bls in sizes:
        mine = [r for r in runs if r["submitted"] == bls]
        agg = statistics.median(r["aggregate_s"] for r in mine)
        fan = statistics.median(r["fan_out_s"] for r in mine)
        rss = max(r["peak_worker_rss_mb"]["bulk"] for r in mine)
        rate = bls / agg
        mid = statistics.median(r["parse_mid_per_s"] or 0.0 for r in mine)
        fwd = statistics.median(r["forward_mid_per_s"] or 0.0 for r in mine)
        base_rate, base_rss, base_mid = base_rate or rate, base_rss or rss, base_mid or mid
        print(
            f"| {bls:,} | {agg:.1f} s | {rate:.0f} ({rate / base_rate:.2f}) | "
            f"{mid:.0f} ({mid / max(base_mid, 1e-9):.2f}) | {fwd:.0f} | {fan:.1f} s | "
            f"{bls / fan:.0f} | {rss:.0f} MiB ({rss / base_rss:.3f}) | "
            f"{sum(r['lost'] for r in mine)} | {sum(r['duplicates'] for r in mine)} |"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine(), "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
