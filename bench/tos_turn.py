"""Where one TOS call's turn goes: the worker's steps beside the TOS sim's own record.

One vessel burst (``make demo``'s, through the front door unless ``--direct``) with the
TOS pool started from ``bench/tos_apps/turn_probe.py``: the vessel app with every
lifecycle step and gate backend call of a TOS task time-stamped. The run then reports:

- the sim's view: busy share over the whole drain, over its middle 80 % and second by
  second (the seconds of the front door's posting against the rest), each
  connection's gaps between calls (the sim's intervals dealt to ``connections`` lanes,
  earliest free first);
- the gate's view: the time-averaged number of leases held (admission decision →
  release script, round-trip midpoints) next to the number of calls in service — a
  lease held with no call in service is the hand-over's cost, a lease free while units
  wait is the waiter's wake-up, both free with an empty queue is supply;
- supply: the TOS queue's depth over the drain (``on_sample``), the front door's post time
  (the scenario samples only once the posting is over: a TOS drain that ends before the
  posting does has no depth samples — the intake was supplying it to the end);
- per task, the median of each step (ms) and of the lease held with no request in it.

Run: ``python bench/tos_turn.py [--direct] [--tos-workers N] [--interchanges 2000]
[--out bench/results/tos_turn.json]``; ``--analyse DIR`` re-reads a run's probe folder.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _harness import clip_busy, pct
from tidegate.harness.scenarios import vessel
from tidegate.harness.scenarios.vessel import Sample, VesselConfig, run_vessel_demo
from tidegate.logging import configure as configure_logging
from tidegate.redis_server import redis_url
from tidegate.sim._http import SimHTTPServer

BENCH_DIR = Path(__file__).resolve().parent


def _capture_sims(store: dict[str, Any]) -> None:
    """Keep the TOS sim's record (its service timeline, read before the run stops it)
    and count the TCP connections the in-process sims accept (a new one per call would
    show here; the demo's TOS serves from its own process and is not counted)."""
    original = vessel.simulated_downstreams
    accept = SimHTTPServer.process_request
    store["connections"] = 0

    def counted(self: SimHTTPServer, request: Any, client_address: Any) -> None:
        store["connections"] += 1
        accept(self, request, client_address)

    SimHTTPServer.process_request = counted  # type: ignore[method-assign]

    @contextlib.contextmanager
    def wrapped(config: VesselConfig, **kwargs: Any) -> Iterator[Any]:
        with original(config, **kwargs) as (customs, tos):
            yield customs, tos
            store["tos_stats"] = tos.stats()

    vessel.simulated_downstreams = wrapped  # type: ignore[assignment]


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _lane_gaps(intervals: list[tuple[float, float]], lanes: int) -> list[float]:
    """Deal the sim's service intervals to ``lanes`` connections (the lane free earliest
    takes the next call) and return every gap between a lane's consecutive calls."""
    free = [float("-inf")] * lanes
    gaps: list[float] = []
    for start, end in sorted(intervals):
        lane = min(range(lanes), key=lambda i: free[i])
        if free[lane] != float("-inf"):
            gaps.append(max(0.0, start - free[lane]))
        free[lane] = end
    return gaps


def _turns(turn_dir: Path) -> list[dict[str, Any]]:
    turns = []
    for path in turn_dir.glob("turn-*.jsonl"):
        turns.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return turns


def _mid(mark: list[Any]) -> float:
    return (mark[1] + mark[2]) / 2


def _call_split(
    turns: list[dict[str, Any]], service: list[tuple[float, float]]
) -> dict[str, list[float]]:
    """Each HTTP post beside the sim's service interval that fits inside it best (the
    one starting first after the post began and ending before it returned): ms from the
    post's start to the service's start, and from the service's end to the post's return."""
    starts = sorted(service)
    keys = [s for s, _ in starts]
    before: list[float] = []
    after: list[float] = []
    for turn in turns:
        post = next((m for m in turn["marks"] if m[0] == "http.post"), None)
        if post is None:
            continue
        i = bisect.bisect_left(keys, post[1])
        while i < len(starts) and starts[i][1] > post[2]:
            i += 1
        if i < len(starts) and starts[i][0] <= post[2]:
            before.append((starts[i][0] - post[1]) * 1000)
            after.append((post[2] - starts[i][1]) * 1000)
    return {"post_to_service_ms": before, "service_to_answer_ms": after}


def _hold_segments(turns: list[dict[str, Any]], service_s: float) -> dict[str, dict[str, Any]]:
    """The lease's hold of each task cut at its instants (ms; mean, p50, p90): the
    admission decision (mid round trip) → its reply → the Acquire step's end (the
    renewer's start inside it) → the ledger's ``sending`` → the HTTP post (less the
    service time) → the release script (mid round trip)."""
    segs: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        segs.setdefault(name, []).append(seconds * 1000)

    for turn in turns:
        marks = turn["marks"]
        got = {name: next((m for m in marks if m[0] == name), None) for name in _HOLD_MARKS}
        decides = [m for m in marks if m[0] == "b.acquire"]
        acquire, sending, post, release = (
            got["Acquire"],
            got["MarkSending"],
            got["http.post"],
            got["b.release"],
        )
        if not (decides and acquire and sending and post and release):
            continue
        admitted = _mid(decides[-1])
        add("admitted_to_reply", decides[-1][2] - admitted)
        add("reply_to_acquire_end", acquire[2] - decides[-1][2])
        if got["renewer_start"]:
            add("of_which_renewer_start", got["renewer_start"][2] - got["renewer_start"][1])
        add("acquire_end_to_sending", sending[1] - acquire[2])
        add("sending", sending[2] - sending[1])
        add("sending_to_post", post[1] - sending[2])
        add("post_less_service", post[2] - post[1] - service_s)
        add("post_to_release_mid", _mid(release) - post[2])
        add("total", _mid(release) - admitted - service_s)
    return {
        name: {
            "mean": round(statistics.fmean(v), 2),
            "p50": _round(pct(v, 0.5)),
            "p90": _round(pct(v, 0.9)),
        }
        for name, v in segs.items()
    }


_HOLD_MARKS = ("Acquire", "MarkSending", "http.post", "b.release", "renewer_start")


def _analyse_turns(turns: list[dict[str, Any]], service_s: float) -> dict[str, Any]:
    steps: dict[str, list[float]] = {}
    held: list[tuple[float, float]] = []
    held_idle: list[float] = []
    between: list[float] = []
    pre_acquire: list[float] = []
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for turn in turns:
        by_pid.setdefault(turn["pid"], []).append(turn)
        marks = turn["marks"]
        for name, start, end in marks:
            steps.setdefault(name, []).append((end - start) * 1000)
        acquire = next((m for m in marks if m[0] == "Acquire"), None)
        decides = [m for m in marks if m[0] == "b.acquire"]
        release = next((m for m in marks if m[0] == "b.release"), None)
        call = next((m for m in marks if m[0] == "Call"), None)
        if acquire and decides and release and call:
            admitted, released = _mid(decides[-1]), _mid(release)
            held.append((admitted, released))
            held_idle.append((released - admitted - service_s) * 1000)
            pre_acquire.append((acquire[1] - turn["prerun"]) * 1000)
    for pid_turns in by_pid.values():
        pid_turns.sort(key=lambda t: t["prerun"])
        between.extend(
            (b["prerun"] - a["postrun"]) * 1000 for a, b in itertools.pairwise(pid_turns)
        )
    return {
        "tasks": len(turns),
        "step_ms_p50": {k: round(statistics.median(v), 2) for k, v in sorted(steps.items())},
        "step_ms_p90": {k: _round(pct(v, 0.9)) for k, v in sorted(steps.items())},
        "lease_held_minus_service_ms": {
            "p50": _round(pct(held_idle, 0.5)),
            "p90": _round(pct(held_idle, 0.9)),
            "mean": round(statistics.fmean(held_idle), 2) if held_idle else None,
        },
        "prerun_to_acquire_ms_p50": _round(pct(pre_acquire, 0.5)),
        "postrun_to_next_prerun_ms": {
            "p50": _round(pct(between, 0.5)),
            "p90": _round(pct(between, 0.9)),
        },
        "hold_segments_ms": _hold_segments(turns, service_s),
        "_held": held,
    }


def _supply(samples: list[tuple[float, int]]) -> dict[str, float] | None:
    """TOS units supplied per second, between 10 % and 90 % of the TOS units published."""
    if not samples:
        return None
    total = max(n for _, n in samples)
    lo = next((t, n) for t, n in samples if n >= 0.1 * total)
    hi = next((t, n) for t, n in samples if n >= 0.9 * total)
    if hi[0] <= lo[0]:
        return None
    return {"units_per_s_10_90": round((hi[1] - lo[1]) / (hi[0] - lo[0]), 1), "units": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interchanges", type=int, default=2000)
    parser.add_argument("--service-s", type=float, default=0.05)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--tos-workers", type=int, default=None)
    parser.add_argument("--direct", action="store_true", help="publish from Python, no front door")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--analyse", type=Path, help="only print the hold's segments of a kept probe folder"
    )
    args = parser.parse_args()
    if args.analyse is not None:
        print(json.dumps(_hold_segments(_turns(args.analyse), args.service_s), indent=1))
        return

    # As ``tidegate demo`` runs: this process hosts the sims and the intake.
    configure_logging(level="WARNING", stream=sys.stderr)
    turn_dir = Path(tempfile.mkdtemp(prefix="tos-turn-"))  # kept, for --analyse
    os.environ["TOS_TURN_DIR"] = str(turn_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
    )
    sims: dict[str, Any] = {}
    _capture_sims(sims)
    depth: list[tuple[float, int]] = []

    samples_tos: list[tuple[float, int]] = []

    def on_sample(sample: Sample, _submitted: int) -> None:
        depth.append((time.time(), sample.depth.get("edi.tos", 0)))
        # TOS units on the broker or served so far: what the intake has supplied by now
        # (give or take the few a worker holds).
        samples_tos.append((sample.t, sample.depth.get("edi.tos", 0) + sample.accepted["tos"]))

    config = VesselConfig(
        interchanges=args.interchanges,
        tos_connections=args.connections,
        tos_service_s=args.service_s,
        tos_workers=args.tos_workers,
        front_door=not args.direct,
        app="tos_apps.turn_probe",
    )
    load_before = os.getloadavg()
    with redis_url() as url:
        report, _ = run_vessel_demo(url, config, on_sample=on_sample)
    load_after = os.getloadavg()
    tos_stats = sims["tos_stats"]
    service = [(float(s), float(e)) for s, e in tos_stats["service_timeline"]]
    first, last = min(s for s, _ in service), max(e for _, e in service)
    span = last - first
    lanes = args.connections
    gaps = _lane_gaps(service, lanes)
    raw_turns = _turns(turn_dir)
    turns = _analyse_turns(raw_turns, args.service_s)
    split = _call_split(raw_turns, service)
    held = turns.pop("_held")
    mid_lo, mid_hi = first + 0.1 * span, last - 0.1 * span
    in_drain = [d for t, d in depth if first <= t <= last]
    tos = report["downstreams"]["tos"]
    result = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "front_door": not args.direct,
        "tos_processes": tos["pool_workers"],
        "load_avg_1_5_15_before": [round(x, 2) for x in load_before],
        "load_avg_1_5_15_after": [round(x, 2) for x in load_after],
        "delivered": report["delivered"],
        "lost": report["lost"],
        "duplicates": report["duplicates"],
        "intake_post_s": (report.get("intake") or {}).get("post_s"),
        "submit_s": report["submit_s"],
        "sim": {
            "busy_share_report": tos["busy_share"],
            "drain_s": round(span, 3),
            "ideal_s": tos["ideal_s"],
            "busy_whole": round(clip_busy(service, first, last, lanes), 4),
            "busy_middle_80": round(clip_busy(service, mid_lo, mid_hi, lanes), 4),
            # Second by second from the first call: the front door's posting (its first
            # ``intake_post_s``) shares the CPUs with the pool, the rest of the drain not.
            "busy_by_second": [
                round(clip_busy(service, first + i, min(first + i + 1, last), lanes), 3)
                for i in range(math.ceil(span))
            ],
            "lane_gap_ms": {
                "p50": _round(pct([g * 1000 for g in gaps], 0.5)),
                "p90": _round(pct([g * 1000 for g in gaps], 0.9)),
                "mean": round(statistics.fmean(gaps) * 1000, 2),
            },
        },
        "gate": {
            # Time-averaged counts: the intervals' summed time over one lane's window.
            "leases_held_avg_whole": round(clip_busy(held, first, last, 1), 3),
            "leases_held_avg_middle_80": round(clip_busy(held, mid_lo, mid_hi, 1), 3),
            "in_service_avg_middle_80": round(clip_busy(service, mid_lo, mid_hi, 1), 3),
        },
        "supply": {
            "tos_queue_depth_samples_in_drain": len(in_drain),
            "tos_queue_empty_share": round(sum(d == 0 for d in in_drain) / len(in_drain), 3)
            if in_drain
            else None,
            "tos_queue_depth_p50": pct([float(d) for d in in_drain], 0.5),
            "tos_queue_depth_max": max(in_drain, default=0),
        },
        "turn": turns,
        "call_split_ms_p50": {k: _round(pct(v, 0.5)) for k, v in split.items()},
        "call_split_ms_p90": {k: _round(pct(v, 0.9)) for k, v in split.items()},
        "in_process_sim_connections": sims["connections"],
        "supply_tos_per_s": _supply(samples_tos),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
