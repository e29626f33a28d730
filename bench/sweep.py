"""Cost of the orphan sweep against the backlog, and of publish tracking.

    .venv/bin/python bench/sweep.py [--sizes 10000,100000,1000000] [--out bench/results/sweep.json]

For each size, a whole berthing burst waiting in the broker: that many kombu-format
messages in one queue, each unit recorded as outstanding (both written with pipelined
LPUSH/HSET, so that a million takes seconds, not the hour ``send_task`` would take).
Then, per size:

- **unarmed**: ``maybe_sweep()`` as every worker runs it each interval when no worker
  has died (the normal case): its time;
- **armed**: ``sweep_once()`` (what runs after a worker's death): its time, the Python
  memory it held at its peak (tracemalloc, in a second, traced sweep), and how long its
  Redis commands took, from ``SLOWLOG`` with no threshold (count, p99, max). On a shared
  machine the max includes the server being descheduled; the p99 is the typical cost.

Publish tracking's cost (``--publish`` units through ``send_task`` with and without it,
paired in the same run) is measured once, at the start.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
import tracemalloc
import uuid

from celery import Celery

from _harness import machine_info, md_table, write_json
from tidegate._redis import client_from_url
from tidegate.integrations.celery.sweep import OrphanSweep, track_publishes
from tidegate.load import DeliveryLedger, ParkingLot
from tidegate.load.depth import RedisDepthProbe
from tidegate.load.outstanding import Outstanding, OutstandingUnit
from tidegate.ops.burst import vessel_burst
from tidegate.redis_server import redis_url

TASK = "edi.tos.push"
QUEUE = "edi.tos"
SLOWLOG_LEN = 100_000


def _publish(app: Celery, docs: list, queue: str) -> float:
    start = time.perf_counter()
    with app.connection_for_write() as conn:
        for doc in docs:
            app.send_task(TASK, args=[doc.envelope()], queue=queue, connection=conn)
    return time.perf_counter() - start


def _tracking_cost(url: str, units: int) -> dict[str, float]:
    """Per-publish time with and without tracking, interleaved in blocks."""
    docs = list(vessel_burst(units, seed=3))
    client = client_from_url(url)
    app = Celery("sweep-bench", broker=url, set_as_current=False)
    outstanding = Outstanding(client, prefix="bench-track")
    tracked = untracked = 0.0
    for block in range(0, len(docs), 500):
        chunk = docs[block : block + 500]
        untrack = track_publishes([TASK], outstanding)
        tracked += _publish(app, chunk, "bench.tracked")
        untrack()
        untracked += _publish(app, chunk, "bench.untracked")
    client.delete("bench.tracked", "bench.untracked", outstanding.units_key, outstanding.queues_key)
    app.close()
    client.close()
    return {
        "publish_ms_tracked": round(tracked / len(docs) * 1000, 3),
        "publish_ms_untracked": round(untracked / len(docs) * 1000, 3),
    }


def _fill(client, outstanding: Outstanding, size: int) -> int:  # type: ignore[no-untyped-def]
    """``size`` queued messages in kombu's JSON layout, each with its record."""
    envelopes = [d.envelope() for d in vessel_burst(min(size, 2_000), seed=11)]
    written = 0
    pipe = client.pipeline(transaction=False)
    for i in range(size):
        envelope = dict(envelopes[i % len(envelopes)], key=f"unit-{i}")
        task_id = str(uuid.uuid4())
        body = base64.b64encode(json.dumps([[envelope], {}, {}]).encode()).decode()
        message = {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"lang": "py", "task": TASK, "id": task_id, "retries": 0},
            "properties": {"delivery_tag": task_id, "body_encoding": "base64"},
        }
        pipe.lpush(QUEUE, json.dumps(message))
        unit = OutstandingUnit(envelope["key"], TASK, task_id, QUEUE, [envelope], {})
        pipe.hset(outstanding.units_key, unit.key, unit.to_json())
        written += 1
        if written % 5_000 == 0:
            pipe.execute()
    pipe.sadd(outstanding.queues_key, QUEUE)
    pipe.execute()
    return written


def _command_times(client) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Every command the sweep sent, from SLOWLOG with no threshold: count, p99, max."""
    entries = [e for e in client.slowlog_get(SLOWLOG_LEN) if b"SLOWLOG" not in e["command"]]
    durations = sorted(int(e["duration"]) for e in entries)
    if not durations:
        return {"commands": 0}
    worst = max(entries, key=lambda e: int(e["duration"]))
    return {
        "commands": len(durations),
        "p99_ms": round(durations[int(0.99 * (len(durations) - 1))] / 1000, 3),
        "max_ms": round(durations[-1] / 1000, 3),
        "max_command": worst["command"].split(b" ", 1)[0].decode(),
    }


def run_size(url: str, size: int) -> dict[str, object]:
    client = client_from_url(url)
    client.flushdb()
    app = Celery("sweep-bench", broker=url, set_as_current=False)
    outstanding = Outstanding(client, prefix="bench")
    sweep = OrphanSweep(
        app,
        outstanding,
        ledger=DeliveryLedger(client, prefix="bench"),
        parking=ParkingLot(client, prefix="bench"),
        broker=RedisDepthProbe(client),
        interval_s=30,
    )
    _fill(client, outstanding, size)
    queue_mb = client.memory_usage(QUEUE) / 2**20

    start = time.perf_counter()
    for i in range(100):
        sweep.maybe_sweep(now=1_000.0 + 31 * i)
        client.delete(outstanding.lock_key)
    unarmed_ms = (time.perf_counter() - start) / 100 * 1000

    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", SLOWLOG_LEN)
    client.slowlog_reset()
    start = time.perf_counter()
    republished = sweep.sweep_once()
    armed_s = time.perf_counter() - start
    commands = _command_times(client)
    client.config_set("slowlog-log-slower-than", 10_000)
    client.slowlog_reset()
    tracemalloc.start()
    republished += sweep.sweep_once()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if republished:
        raise SystemExit(f"{republished} queued units were taken for orphans")
    client.flushdb()
    client.close()
    app.close()
    return {
        "queued": size,
        "queue_mib": round(queue_mb, 1),
        "unarmed_ms": round(unarmed_ms, 3),
        "armed_s": round(armed_s, 2),
        "sweeper_peak_python_mib": round(peak / 2**20, 2),
        "redis_commands": commands,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--publish", type=int, default=5_000)
    parser.add_argument("--out", default="bench/results/sweep.json")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with redis_url() as url:
        tracking = _tracking_cost(url, args.publish)
        print(json.dumps(tracking), flush=True)
        runs = []
        for size in sizes:
            run = run_size(url, size)
            print(json.dumps(run), flush=True)
            runs.append(run)
        machine = machine_info(client_from_url(url), ["celery", "kombu", "redis"])
    print(
        md_table(
            [
                "queued",
                "queue MiB",
                "unarmed, per interval",
                "armed sweep",
                "sweeper memory at peak",
                "its Redis commands: count, p99, max",
            ],
            [
                [
                    f"{r['queued']:,}",
                    r["queue_mib"],
                    f"{r['unarmed_ms']} ms",
                    f"{r['armed_s']} s",
                    f"{r['sweeper_peak_python_mib']} MiB",
                    "{commands}, {p99_ms} ms, {max_ms} ms ({max_command})".format(
                        **r["redis_commands"]  # type: ignore[arg-type]
                    ),
                ]
                for r in runs
            ],
        )
    )
    write_json(
        args.out,
        {
            "benchmark": "sweep",
            "command": "python bench/sweep.py " + " ".join(argv or sys.argv[1:]),
            "machine": machine,
            "tracking": tracking,
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
