"""Cost of the orphan sweep against the backlog, and of publish tracking.

    .venv/bin/python bench/sweep.py [--sizes 10000,100000,1000000] [--out bench/results/sweep.json]

For each size, a whole berthing burst waiting in the broker: that many kombu-format
messages in one queue, each unit recorded as outstanding and indexed as the publish
tracker does (message header ``s0``, ``pushed`` score ``s1``; all written with pipelined
commands, so that a million takes a minute, not the hour ``send_task`` would take). Then
the state a worker's death leaves: ``--in-flight`` messages popped and held in
``unacked`` (running), ``--lost`` popped and gone. Per size:

- **unarmed**: ``maybe_sweep()`` as every worker runs it each interval when no worker
  has died (the normal case): its time;
- **armed**: two ``sweep_once()`` (a loss counts after two sweeps): the first one's time,
  every Redis command of both timed by ``SLOWLOG`` with no threshold (count, p99, the
  slowest and which), the sweeping process's RSS at its peak during the sweeps (VmHWM,
  reset before them) and its Python memory at the peak (tracemalloc, a third sweep).
  The second sweep must republish exactly the lost units, and no queued or in-flight
  one. On a shared machine the max includes the server being descheduled.

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
from pathlib import Path

from celery import Celery

from _harness import machine_info, md_table, write_json
from tidegate._redis import client_from_url
from tidegate.harness.burst import vessel_burst
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sweep import OrphanSweep, track_publishes
from tidegate.load import DeliveryLedger, ParkingLot
from tidegate.load.outstanding import SEQ_HEADER, Outstanding, OutstandingUnit
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
    """``size`` queued messages in kombu's JSON layout, each with its record, indexed
    as the tracker indexes them: ``s0`` in the message, ``s1`` in ``pushed``."""
    envelopes = [d.envelope() for d in vessel_burst(min(size, 2_000), seed=11)]
    # JSON texts with a placeholder, filled per unit: the fill is string work, not JSON.
    bodies = [json.dumps([[dict(e, key="@KEY@")], {}, {}]) for e in envelopes]
    records = [
        OutstandingUnit("", TASK, "@TASK@", QUEUE, [dict(e, key="@KEY@")], {}).to_json()
        for e in envelopes
    ]
    message = json.dumps(
        {
            "body": "@BODY@",
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"lang": "py", "task": TASK, "id": "@TASK@", "retries": 0, SEQ_HEADER: 0},
            "properties": {"delivery_tag": "@TASK@", "body_encoding": "base64"},
        }
    ).replace(f'"{SEQ_HEADER}": 0', f'"{SEQ_HEADER}": @S0@')
    seconds, micros = client.time()
    seq = seconds * 1_000_000 + micros
    pushed = outstanding.pushed_key(QUEUE)
    pipe = client.pipeline(transaction=False)
    for i in range(size):
        key, task_id = f"unit-{i}", str(uuid.uuid4())
        s0, s1 = seq + 1, seq + 2
        seq = s1
        body = base64.b64encode(bodies[i % len(bodies)].replace("@KEY@", key).encode()).decode()
        pipe.lpush(
            QUEUE,
            message.replace("@BODY@", body).replace("@TASK@", task_id).replace("@S0@", str(s0)),
        )
        record = records[i % len(records)].replace("@KEY@", key).replace("@TASK@", task_id)
        pipe.hset(outstanding.units_key, key, record)
        pipe.zadd(pushed, {key: s1})
        if (i + 1) % 5_000 == 0:
            pipe.execute()
    pipe.sadd(outstanding.queues_key, QUEUE)
    pipe.set(outstanding.seq_key, seq)
    pipe.set(outstanding.indexed_key, "1")
    pipe.execute()
    return size


def _pop(client, probe: RedisDepthProbe, in_flight: int, lost: int) -> set[str]:  # type: ignore[no-untyped-def]
    """Take the oldest ``in_flight + lost`` messages: the first into ``unacked`` (as
    kombu records a delivery), the rest nowhere (the worker died). Returns the lost keys."""
    gone = set()
    for i in range(in_flight + lost):
        raw = client.rpop(QUEUE)
        if i < in_flight:
            client.hset(probe.unacked_hash, f"tag-{i}", json.dumps([json.loads(raw), "", QUEUE]))
        else:
            body = json.loads(base64.b64decode(json.loads(raw)["body"]))
            gone.add(body[0][0]["key"])
    return gone


def _rss_peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _reset_rss_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


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


def run_size(url: str, size: int, in_flight: int, lost: int) -> dict[str, object]:
    client = client_from_url(url)
    client.flushdb(asynchronous=True)  # a million keys: freed in the background
    app = Celery("sweep-bench", broker=url, set_as_current=False)
    outstanding = Outstanding(client, prefix="bench")
    probe = RedisDepthProbe(client)
    sweep = OrphanSweep(
        app,
        outstanding,
        ledger=DeliveryLedger(client, prefix="bench"),
        parking=ParkingLot(client, prefix="bench"),
        broker=probe,
        interval_s=30,
    )
    start = time.perf_counter()
    _fill(client, outstanding, size)
    fill_s = time.perf_counter() - start
    queue_mb = client.memory_usage(QUEUE) / 2**20
    gone = _pop(client, probe, in_flight, lost)

    start = time.perf_counter()
    for i in range(100):
        sweep.maybe_sweep(now=1_000.0 + 31 * i)
        client.delete(outstanding.lock_key)
    unarmed_ms = (time.perf_counter() - start) / 100 * 1000

    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", SLOWLOG_LEN)
    client.slowlog_reset()
    _reset_rss_peak()
    rss_before = _rss_peak_mib()
    start = time.perf_counter()
    first = sweep.sweep_once()
    armed_s = time.perf_counter() - start
    start = time.perf_counter()
    second = sweep.sweep_once()
    second_s = time.perf_counter() - start
    rss_peak = _rss_peak_mib()
    commands = _command_times(client)
    client.config_set("slowlog-log-slower-than", 10_000)
    client.slowlog_reset()
    tracemalloc.start()
    third = sweep.sweep_once()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    back = {u.key for u in (outstanding.get(k) for k in gone) if u is not None}
    if (first, second, third) != (0, lost, 0) or len(back) != lost:
        raise SystemExit(f"sweeps republished {first}, {second}, {third}; {lost} were lost")
    client.flushdb(asynchronous=True)  # a million keys: freed in the background
    client.close()
    app.close()
    return {
        "queued": size,
        "in_flight": in_flight,
        "lost": lost,
        "fill_s": round(fill_s, 1),
        "queue_mib": round(queue_mb, 1),
        "unarmed_ms": round(unarmed_ms, 3),
        "armed_s": round(armed_s, 3),
        "second_sweep_s": round(second_s, 3),
        "republished": second,
        "sweeper_rss_mib": round(rss_peak, 1),
        "sweeper_rss_growth_mib": round(rss_peak - rss_before, 1),
        "sweeper_peak_python_mib": round(peak / 2**20, 2),
        "redis_commands": commands,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--publish", type=int, default=5_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--lost", type=int, default=8)
    parser.add_argument("--out", default="bench/results/sweep.json")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with redis_url() as url:
        tracking = _tracking_cost(url, args.publish)
        print(json.dumps(tracking), flush=True)
        runs = []
        for size in sizes:
            run = run_size(url, size, args.in_flight, args.lost)
            print(json.dumps(run), flush=True)
            runs.append(run)
        machine = machine_info(client_from_url(url), ["celery", "kombu", "redis"])
    print(
        md_table(
            [
                "queued",
                "queue MiB",
                "unarmed, per interval",
                "armed sweep (first, second)",
                "lost / republished",
                "sweeper RSS at peak (growth)",
                "Python at peak",
                "its Redis commands: count, p99, slowest",
            ],
            [
                [
                    f"{r['queued']:,}",
                    r["queue_mib"],
                    f"{r['unarmed_ms']} ms",
                    f"{r['armed_s'] * 1000:.1f} ms, {r['second_sweep_s'] * 1000:.1f} ms",
                    f"{r['lost']} / {r['republished']}",
                    f"{r['sweeper_rss_mib']} MiB ({r['sweeper_rss_growth_mib']:+.1f})",
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
