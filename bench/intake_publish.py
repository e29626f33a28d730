"""The intake's publish path under concurrent requests: one publishing thread vs each thread.

``bench/intake.py`` measures the whole front door over HTTP; on a shared 2-CPU machine
its figures swing from step to step. This one isolates what the batching publisher
(:mod:`tidegate.intake.batching`) changes, in one process on one embedded Redis, and
compares the two ways **pair by pair in the same run**:

* **direct** — ``AdmissionPublisher(batching=False)``: every request thread calls
  Celery's ``send_task`` for its own units (the intake before the change);
* **batched** — ``AdmissionPublisher()``: the units of the requests waiting at a moment
  go out in one kombu publish batch (one pipelined round trip) from one thread.

Each round posts ``--per-round`` distinct interchanges of the vessel burst through the
real :class:`~tidegate.intake.IntakePipeline` (read, duplicate claim, watermarks,
publish, record, CONTRL) from ``--threads`` threads in closed loop, once per mode, the
order alternating; the broker queues are emptied between rounds. Reported per mode:
interchanges/s and request latency p50/p99 (median over rounds), and the per-round
ratio batched/direct. A sequential (one thread, direct) round gives the reference.

Usage::

    .venv/bin/python bench/intake_publish.py [--rounds 5] [--out bench/results/intake_publish.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _harness import CpuWatch, describe_interference, machine_info, write_json


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _round(pipeline: Any, bodies: list[bytes], threads: int) -> dict[str, float]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    cursor = iter(bodies)

    def worker() -> None:
        while True:
            with lock:
                body = next(cursor, None)
            if body is None:
                return
            start = time.perf_counter()
            decision = pipeline.submit(body)
            took = time.perf_counter() - start
            with lock:
                latencies.append(took)
                statuses[decision.http_status] = statuses.get(decision.http_status, 0) + 1

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    if set(statuses) != {202}:
        raise SystemExit(f"unexpected answers {statuses}: the comparison needs every one 202")
    return {
        "per_s": round(len(bodies) / elapsed, 1),
        "p50_ms": round(_pct(latencies, 0.5) * 1000, 1),
        "p99_ms": round(_pct(latencies, 0.99) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="pairs of rounds")
    parser.add_argument("--per-round", type=int, default=300, help="interchanges per round")
    parser.add_argument("--threads", type=int, default=8, help="concurrent requests")
    parser.add_argument("--out", default="bench/results/intake_publish.json")
    args = parser.parse_args()

    import redis
    from celery import Celery

    from tidegate.cli.intake import DEFAULT_TASKS
    from tidegate.harness.burst import vessel_burst
    from tidegate.intake import AdmissionPublisher, IntakePipeline, RedisDuplicates
    from tidegate.load.admission import Admission
    from tidegate.load.watermarks import Watermarks, WatermarkStore
    from tidegate.logging import configure as configure_logging
    from tidegate.redis_server import EmbeddedRedis

    configure_logging(level="WARNING")  # one event per request would swamp the figures

    need = args.per_round * (2 * args.rounds + 3)  # 2 warm-up, 1 sequential, the pairs
    bodies = [d.text.encode("latin-1") for d in vessel_burst(need, seed=17)]
    with EmbeddedRedis() as store:
        client = redis.Redis.from_url(store.url)
        app = Celery("intake-publish-bench", broker=store.url)
        prefix = "bench"

        def pipeline(batching: bool) -> IntakePipeline:
            admission = Admission.for_celery(
                app,
                DEFAULT_TASKS,
                client=client,
                prefix=prefix,
                watermarks=WatermarkStore(
                    client, prefix=prefix, defaults=Watermarks(hwm=10**8, lwm=1, shed_after=3)
                ),
            )
            return IntakePipeline(
                duplicates=RedisDuplicates(client, prefix=prefix),
                publisher=AdmissionPublisher(admission, batching=batching),
            )

        modes = {"direct": pipeline(False), "batched": pipeline(True)}
        chunks = iter(bodies[i : i + args.per_round] for i in range(0, need, args.per_round))

        def clear() -> None:
            for queue in DEFAULT_TASKS:
                client.delete(queue)

        # Warm-up: connections, code paths (not counted).
        for p in modes.values():
            _round(p, next(chunks)[: args.per_round // 4], 2)
        clear()
        watch = CpuWatch()
        sequential = _round(modes["direct"], next(chunks), 1)
        clear()
        rounds: list[dict[str, Any]] = []
        for number in range(args.rounds):
            order = ["direct", "batched"] if number % 2 == 0 else ["batched", "direct"]
            pair: dict[str, Any] = {}
            for mode in order:
                pair[mode] = _round(modes[mode], next(chunks), args.threads)
                clear()
            pair["ratio_per_s"] = round(pair["batched"]["per_s"] / pair["direct"]["per_s"], 2)
            pair["ratio_p99"] = round(pair["batched"]["p99_ms"] / pair["direct"]["p99_ms"], 2)
            print(json.dumps(pair), flush=True)
            rounds.append(pair)
        cpu = watch.stop()
        for p in modes.values():
            p.close()
        app.close()

    def median(mode: str, key: str) -> float:
        return round(statistics.median(r[mode][key] for r in rounds), 1)

    summary = {
        mode: {k: median(mode, k) for k in ("per_s", "p50_ms", "p99_ms")}
        for mode in ("direct", "batched")
    }
    summary["sequential_direct"] = sequential
    summary["ratio_per_s_median"] = statistics.median(r["ratio_per_s"] for r in rounds)
    summary["ratio_p99_median"] = statistics.median(r["ratio_p99"] for r in rounds)
    print(json.dumps(summary, indent=1))
    print(describe_interference(cpu))
    write_json(
        args.out,
        {
            "machine": machine_info(),
            "args": vars(args),
            "rounds": rounds,
            "summary": summary,
            "cpu": cpu,
        },
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
