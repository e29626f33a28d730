"""Cost of the orphan sweep and of publish tracking, on the embedded Redis (issue 7).

Publishes ``--units`` vessel envelopes (``tidegate.ops.burst``, synthetic) to one queue
with publish tracking on, then a sample of them again to a second queue without it
(per-publish cost, paired in the same run), and times ``OrphanSweep.sweep_once()``
``--repeat`` times with every unit outstanding and queued — the worst case, a whole
berthing burst waiting in the broker. Reports the Redis memory of the records next to
the queue's.

    .venv/bin/python bench/sweep.py [--units 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from celery import Celery

from _harness import machine_info, write_json
from tidegate._redis import client_from_url
from tidegate.integrations.celery.sweep import OrphanSweep, track_publishes
from tidegate.load import DeliveryLedger, ParkingLot
from tidegate.load.depth import RedisDepthProbe
from tidegate.load.outstanding import Outstanding
from tidegate.ops.burst import vessel_burst
from tidegate.redis_server import redis_url

TASK = "edi.tos.push"


def _publish(app: Celery, docs: list, queue: str) -> float:
    start = time.perf_counter()
    with app.connection_for_write() as conn:
        for doc in docs:
            app.send_task(TASK, args=[doc.envelope()], queue=queue, connection=conn)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="bench/results/sweep.json")
    args = parser.parse_args(argv)
    docs = list(vessel_burst(args.units, seed=3))
    sample = docs[: max(1, len(docs) // 5)]
    with redis_url() as url:
        client = client_from_url(url)
        app = Celery("sweep-bench", broker=url, set_as_current=False)
        outstanding = Outstanding(client, prefix="bench")
        untrack = track_publishes([TASK], outstanding)
        tracked_s = _publish(app, docs, "edi.tos")
        untrack()
        untracked_s = _publish(app, sample, "edi.tos.untracked")
        sweep = OrphanSweep(
            app,
            outstanding,
            ledger=DeliveryLedger(client, prefix="bench"),
            parking=ParkingLot(client, prefix="bench"),
            broker=RedisDepthProbe(client),
        )
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            if sweep.sweep_once() != 0:
                raise SystemExit("a queued unit was taken for an orphan")
            times.append(time.perf_counter() - start)
        result = {
            "benchmark": "sweep",
            "command": "python bench/sweep.py " + " ".join(argv or sys.argv[1:]),
            "machine": machine_info(client, ["celery", "kombu", "redis"]),
            "units": args.units,
            "publish_ms_tracked": round(tracked_s / len(docs) * 1000, 3),
            "publish_ms_untracked": round(untracked_s / len(sample) * 1000, 3),
            "sweep_ms_median": round(statistics.median(times) * 1000, 1),
            "sweep_ms_min_max": [round(min(times) * 1000, 1), round(max(times) * 1000, 1)],
            "records_bytes": client.memory_usage(outstanding.units_key),
            "queue_bytes": client.memory_usage("edi.tos"),
        }
        client.close()
        app.close()
    write_json(args.out, result)
    for key, value in result.items():
        if key != "machine":
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
