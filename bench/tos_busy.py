"""How busy the TOS's connections are: one worker per connection, then a pool sized from it.

Two vessel bursts through real Celery workers and the real gate, one after the other on
the same machine (a pair, so the ratio means something on shared CPUs):

1. **one per connection** — the TOS pool has as many processes as the TOS has
   connections. Each connection then follows one worker's cycle, so the TOS's busy share
   gives the per-task overhead back: ``o = s × (1 / busy − 1)``
   (:func:`tidegate.load.sizing.overhead_from_busy_share`).
2. **sized** — the pool gets ``ceil(cap × (s + o) / s) + 1`` processes from that measured
   overhead (:func:`tidegate.load.sizing.connection_workers`).

Busy share is the TOS sim's own record: summed service time over connections × (first
call's start → last call's end). ``--service-s`` sets the TOS's service time (50 ms in
``make demo``); a longer one makes the pair less sensitive to CPU contention.

``--demo S [S ...]`` runs the demo as ``make demo`` sizes it (the pool from the default
overhead, :func:`tidegate.harness.scenarios.vessel.tos_pool`) at each TOS service time in
turn, ``--rounds`` times, alternating: what the demo's busy share is at calls of another
length, on the same machine in the same half hour. The HTTP exchange beyond the service
time costs the same at every length (``bench/tos_floor.py --design alone``), so its share
of a call shrinks as the call grows.

Run: ``python bench/tos_busy.py [--interchanges 2000] [--service-s 0.05]
[--out bench/results/tos_busy_pair.json]`` or ``python bench/tos_busy.py --demo 0.05 0.1
[--rounds 3] [--out …]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from _harness import machine_info
from tidegate.harness.scenarios.vessel import VesselConfig, run_vessel_demo
from tidegate.load.sizing import connection_workers, overhead_from_busy_share
from tidegate.logging import configure as configure_logging
from tidegate.redis_server import redis_url


def _run(config: VesselConfig) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with redis_url() as url:
        report, _ = run_vessel_demo(url, config)
    tos = report["downstreams"]["tos"]
    return {
        "tos_processes": tos["pool_workers"],
        "busy_share": tos["busy_share"],
        "tos_drain_s": tos["drain_s"],
        "tos_ideal_s": tos["ideal_s"],
        "tos_503": tos["responses_503"],
        "customs_429": report["downstreams"]["customs"]["responses_429"],
        "delivered": report["delivered"],
        "lost": report["lost"],
        "duplicates": report["duplicates"],
        "accepted_twice": report["accepted_twice"],
        "peak_worker_rss_mb": report["peak_worker_rss_mb"],
        "intake_post_s": (report.get("intake") or {}).get("post_s"),
        "load_avg_1m": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interchanges", type=int, default=2000)
    parser.add_argument("--service-s", type=float, default=0.05)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--demo", type=float, nargs="+", metavar="SERVICE_S")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # The intake's and sims' decisions stay out of the figures on stdout (as in
    # ``tidegate demo`` and ``bench/tos_turn.py``).
    configure_logging(level="WARNING", stream=sys.stderr)
    base = VesselConfig(
        interchanges=args.interchanges,
        tos_connections=args.connections,
        tos_service_s=args.service_s,
    )
    if args.demo:
        _demo_rounds(base, args.demo, args.rounds, args.out)
        return

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    one = _run(
        VesselConfig(**{**_fields(base), "tos_workers": args.connections}),
    )
    overhead = overhead_from_busy_share(one["busy_share"], args.service_s)
    workers = connection_workers(args.connections, args.service_s, overhead)
    sized = _run(VesselConfig(**{**_fields(base), "tos_workers": workers}))
    result = {
        "started": started,
        "interchanges": args.interchanges,
        "service_s": args.service_s,
        "connections": args.connections,
        "one_per_connection": one,
        "measured_overhead_s": round(overhead, 4),
        "sized": sized,
        "busy_ratio": round(sized["busy_share"] / one["busy_share"], 3),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


def _demo_rounds(
    base: VesselConfig, service_times: list[float], rounds: int, out: Path | None
) -> None:
    """The demo's own pool (``base`` as ``make demo`` sizes it) at each service time,
    alternating, ``rounds`` times."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runs: list[dict[str, Any]] = []
    for round_ in range(1, rounds + 1):
        for service_s in service_times:
            config = VesselConfig(**{**_fields(base), "tos_service_s": service_s})
            run = {"round": round_, "service_s": service_s, **_run(config)}
            print(json.dumps(run), flush=True)
            runs.append(run)
    result = {
        "started": started,
        "interchanges": base.interchanges,
        "connections": base.tos_connections,
        "machine": machine_info(),
        "runs": runs,
    }
    if out is not None:
        out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def _fields(config: VesselConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


if __name__ == "__main__":
    main()
