"""Where the bulk path's time goes, by CPU time and by counting (issue #18).

    python bench/bulk_profile.py [--bls 1000,20000] [--workers 4] [--out PATH]

Wall-clock rates on a shared 2-CPU machine are noisy; CPU seconds per B/L and Redis
command counts per B/L are not. For each size this runs the bulk scenario (as
``bench/bulk.py`` does) and samples, every half second: CPU seconds of every process of
the run (the bulk pool's main and children, the TOS pool's, the embedded redis-server,
this process — which hosts the simulated TOS), ``INFO commandstats`` of the Redis the
run uses, and the queue depths. It reports each at the moment the aggregate wrote its
summary (the end of what ``bench/bulk.py`` calls B/L units/s), divided by the B/Ls.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import psutil

from _harness import CpuWatch
from tidegate._redis import client_from_url
from tidegate.harness.celery_fleet import Pool
from tidegate.harness.scenarios import bulk as bulk_scenario
from tidegate.harness.scenarios.bulk import BulkConfig
from tidegate.harness.scenarios.vessel import Sample
from tidegate.keys import BatchKeys, Keyspace
from tidegate.redis_server import redis_url


def _group(proc: psutil.Process, me: int) -> str:
    """Which part of the run a process is: bulk/tos main or child, redis, bench."""
    if proc.pid == me:
        return "bench+tos_sim"
    try:
        cmd = " ".join(proc.cmdline())
        if "redis-server" in cmd:
            return "redis"
        parent = proc.parent()
        pcmd = " ".join(parent.cmdline()) if parent else ""
    except psutil.Error:
        return "gone"
    for pool in ("bulk", "tos"):
        # A prefork child has its main's command line: tell them apart by the parent.
        if f"{pool}@" in pcmd:
            return f"{pool}_children"
        if f"{pool}@" in cmd:
            return f"{pool}_main"
    return "other"


def cpu_by_group() -> dict[str, float]:
    me = psutil.Process()
    out: dict[str, float] = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        name = _group(proc, me.pid)
        out[name] = out.get(name, 0.0) + t.user + t.system
        if name.endswith("_main"):
            # A recycled pool child (max_tasks_per_child) is gone from the tree; its main
            # reaped it, so its CPU is in the main's children_* times.
            reaped = name.replace("_main", "_children")
            out[reaped] = out.get(reaped, 0.0) + t.children_user + t.children_system
    return out


def child_pids() -> dict[str, set[int]]:
    """The live pool children of each pool (to count recycles)."""
    me = psutil.Process()
    out: dict[str, set[int]] = {}
    for proc in me.children(recursive=True):
        name = _group(proc, me.pid)
        if name.endswith("_children"):
            out.setdefault(name, set()).add(proc.pid)
    return out


def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """calls and usec per command, cumulative."""
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): (v["calls"], v["usec"]) for k, v in stats.items()}


class BatchProgress:
    """A bulk run's batch over time: units stored (dispatch), outcomes recorded (parse),
    B/Ls marked forwarded (aggregate) — read from Redis at each sample of the run.

    The run's key prefix is random: the batch is found by its order key at first sight.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.prefix = ""
        self.keys: BatchKeys | None = None
        self.points: list[tuple[float, dict[str, int]]] = []

    def read(self) -> dict[str, int]:
        if self.keys is None:
            for key in self.client.scan_iter(match="tidegate-bulk-*:batch:*:order", count=1000):
                self.prefix, _, rest = key.decode().partition(":batch:{")
                self.keys = Keyspace(self.prefix).batch(rest.rpartition("}:order")[0])
        if self.keys is None:
            return {"stored": 0, "parsed": 0, "forwarded": 0}
        return {
            "stored": int(self.client.zcard(self.keys.order)),
            "parsed": int(self.client.hlen(self.keys.outcomes)),
            "forwarded": int(self.client.scard(self.keys.forwarded)),
        }

    def on_sample(self, sample: Sample, _total: int) -> None:
        self.points.append((sample.t, self.read()))

    def time_at(self, name: str, count: float) -> float | None:
        """When ``name`` reached ``count`` (interpolated between samples)."""
        before = (0.0, 0)
        for t, values in self.points:
            if values[name] >= count:
                t0, v0 = before
                return t0 + (t - t0) * (count - v0) / max(1, values[name] - v0)
            before = (t, values[name])
        return None

    def mid_rate(self, name: str, total: int, lo: float = 0.2, hi: float = 0.8) -> float | None:
        """Units per second of step ``name`` between ``lo`` and ``hi`` of ``total``: the
        steady state, without the step's start and its tail."""
        a, b = self.time_at(name, lo * total), self.time_at(name, hi * total)
        if a is None or b is None or b <= a:
            return None
        return (hi - lo) * total / (b - a)


class _AggregateDone(Exception):
    """Raised from the sampler to end a run at the aggregate (``--stop-at-aggregate``)."""


def run(url: str, bls: int, workers: int, *, stop_at_aggregate: bool = False) -> dict[str, Any]:
    """One bulk scenario of ``bls`` B/Ls, sampled (see the module docstring)."""
    client = client_from_url(url)
    timeline: list[dict[str, Any]] = []
    # CPU accumulated by pool processes is lost when they exit; sample while they live.

    batch = BatchProgress(client)
    progress = batch.read

    seen: dict[str, set[int]] = {}
    summary: dict[str, Any] = {}

    def on_sample(sample: Sample, _total: int) -> None:
        for name, pids in child_pids().items():
            seen.setdefault(name, set()).update(pids)
        timeline.append(
            {
                "wall": time.time(),
                "t": sample.t,
                "depth": sample.depth,
                "progress": progress(),
                "accepted": sample.accepted["tos"],
                "cpu": cpu_by_group(),
                "cmd": commandstats(client),
            }
        )
        raw = client.get(batch.keys.summary) if batch.keys else None
        if raw:
            summary.update(json.loads(raw))
            if stop_at_aggregate:
                raise _AggregateDone

    config = BulkConfig(
        bls=bls,
        poison_every=0,
        workers=workers,
        seed=100,
        tos_connections=8,
        tos_service_s=0.002,
        timeout_s=3600.0,
    )
    watch = CpuWatch()
    try:
        report, _ = bulk_scenario.run_bulk_demo(url, config, on_sample=on_sample)
    except _AggregateDone:
        # Stopped at the aggregate: the TOS fan-out (minutes) is not waited for.
        report = {"lost": None, "duplicates": None, "fan_out_s": None}
        client.delete(*client.keys(f"{batch.prefix}:*"))
    cpu_watch = watch.stop()
    agg_wall = summary["aggregated_at"]
    report["aggregate_s"] = round(agg_wall - (timeline[0]["wall"] - timeline[0]["t"]), 3)
    at = next((s for s in timeline if s["wall"] >= agg_wall), timeline[-1])
    # The first sample is taken right after the dispatch message is sent: the workers'
    # start-up is not in it.
    base_cpu, base_cmd = timeline[0]["cpu"], timeline[0]["cmd"]
    phases = {
        name: next((s["t"] for s in timeline if s["progress"][name] >= bls), None)
        for name in ("stored", "parsed", "forwarded")
    }
    cpu = {k: round((v - base_cpu.get(k, 0.0)) * 1000 / bls, 3) for k, v in at["cpu"].items()}
    cmds = {}
    for name, (calls, usec) in at["cmd"].items():
        c0, u0 = base_cmd.get(name, (0, 0))
        if calls - c0:
            cmds[name] = {
                "calls_per_bl": round((calls - c0) / bls, 3),
                "usec_per_call": round((usec - u0) / (calls - c0), 2),
                "usec_per_bl": round((usec - u0) / bls, 2),
            }
    return {
        "bls": bls,
        "aggregate_s": report["aggregate_s"],
        "units_per_s": round(bls / report["aggregate_s"], 1),
        "fan_out_s": report["fan_out_s"],
        "lost": report["lost"],
        "duplicates": report["duplicates"],
        "cpu_ms_per_bl_to_aggregate": cpu,
        "redis_per_bl_to_aggregate": dict(
            sorted(cmds.items(), key=lambda kv: -kv[1]["usec_per_bl"])
        ),
        "phases_s": phases,
        "pool_children_seen": {k: len(v) for k, v in seen.items()},
        "timeline": [(s["t"], s["depth"], s["progress"], s["accepted"]) for s in timeline],
        "cpu_watch": cpu_watch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bls", default="1000,20000")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--max-tasks-per-child",
        type=int,
        help="pass --max-tasks-per-child to every pool (an experiment: how much do recycles cost?)",
    )
    parser.add_argument(
        "--stop-at-aggregate",
        action="store_true",
        help="end each run when the aggregate has written its summary",
    )
    args = parser.parse_args()
    if args.max_tasks_per_child:
        limit = ["--max-tasks-per-child", str(args.max_tasks_per_child)]

        def pool(*a: Any, **kw: Any) -> Pool:
            kw["extra"] = (*kw.get("extra", ()), *limit)
            return Pool(*a, **kw)

        bulk_scenario.Pool = pool  # type: ignore[misc,assignment]
    results = []
    with redis_url() as url:
        for bls in (int(n) for n in args.bls.split(",")):
            result = run(url, bls, args.workers, stop_at_aggregate=args.stop_at_aggregate)
            results.append(result)
            print(
                f"{bls} B/Ls: aggregate {result['aggregate_s']} s "
                f"({result['units_per_s']}/s), lost {result['lost']}",
                flush=True,
            )
            print("  phases (s):", result["phases_s"], result["pool_children_seen"])
            print("  CPU ms per B/L:", result["cpu_ms_per_bl_to_aggregate"])
            top = list(result["redis_per_bl_to_aggregate"].items())[:8]
            for name, s in top:
                print(f"  redis {name}: {s}")
            print("  other CPU:", result["cpu_watch"], flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
