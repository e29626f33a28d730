"""What a pool child keeps per task it has run: tracemalloc in a real worker's children.

    .venv/bin/python bench/child_heap.py [--tasks 2400] [--pool tos] [--at 100,900]

Starts one real worker of the vessel app (``memory_apps.child_probe``: tracemalloc in
every pool child, a snapshot after its 100th and 900th task — one child's life is
``max_tasks_per_child`` = 1,000 tasks), pushes ``--tasks`` units of the pool's queue
through it against the simulated downstream, and prints, per child, its RSS and traced
memory at both counts and the allocation sites that grew most between them. The
difference is what a child holds per task it has run; the issue's bound is that it
holds nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from celery import Celery

from tidegate._redis import client_from_url
from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.integrations.celery.sweep import track_publishes
from tidegate.load.outstanding import Outstanding
from tidegate.redis_server import redis_url
from tidegate.sim import CustomsSim, TosSim

BENCH_DIR = Path(__file__).resolve().parent
TASKS = {"tos": "edi.tos.push", "customs": "edi.customs.submit"}


def _show(heap_dir: Path, first: str, last: str, steps: int, top: int) -> None:
    import json

    for path in sorted(heap_dir.glob(f"*-{last}.json")):
        pid = path.name.split("-")[0]
        if not (heap_dir / f"{pid}-{first}.json").exists():
            continue
        a = json.loads((heap_dir / f"{pid}-{first}.json").read_text())
        b = json.loads((heap_dir / f"{pid}-{last}.json").read_text())
        print(
            f"\n== child {pid}: RSS {a['rss_mb']:.1f} → {b['rss_mb']:.1f} MiB, traced "
            f"{a['traced_mb']:.2f} → {b['traced_mb']:.2f} MiB (peak {b['traced_peak_mb']:.1f}) "
            f"over {steps} steps ({first} → {last})"
        )
        grown = {
            name: kb - a["mappings_kb"].get(name, 0)
            for name, kb in b["mappings_kb"].items()
            if abs(kb - a["mappings_kb"].get(name, 0)) >= 64
        }
        print(f"   resident KiB grown per mapping: {grown}")
        ma, mb = a["mallinfo"], b["mallinfo"]
        print(
            "   malloc: arena {:.1f} → {:.1f} MiB, in use {:.1f} → {:.1f}, free {:.1f} → {:.1f}, "
            "mmapped {:.1f} → {:.1f}".format(
                *(
                    v / 2**20
                    for f in ("arena", "uordblks", "fordblks", "hblkhd")
                    for v in (ma[f], mb[f])
                )
            )
        )
        early, late = heap_dir / f"{pid}-{first}.snap", heap_dir / f"{pid}-{last}.snap"
        if not (early.exists() and late.exists()):
            continue
        old = tracemalloc.Snapshot.load(str(early))
        new = tracemalloc.Snapshot.load(str(late))
        for stat in new.compare_to(old, "traceback")[:top]:
            if stat.size_diff <= 0:
                continue
            print(
                f"-- +{stat.size_diff / 1024:.1f} KiB, +{stat.count_diff} blocks "
                f"({stat.count_diff / steps:.2f} per step)"
            )
            for line in stat.traceback.format(limit=12)[-24:]:
                print("   ", line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2400)
    parser.add_argument("--pool", choices=sorted(TASKS), default="tos")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--at", default="100,900")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--dir", default=None)
    parser.add_argument(
        "--no-trace", action="store_true", help="RSS, mappings and malloc figures only"
    )
    args = parser.parse_args(argv)
    at = tuple(int(n) for n in args.at.split(","))
    heap_dir = Path(args.dir or tempfile.mkdtemp(prefix="child-heap-"))
    heap_dir.mkdir(parents=True, exist_ok=True)
    queue = f"edi.{args.pool}"
    prefix = f"tgheap-{uuid.uuid4().hex[:8]}"
    docs = [d for d in vessel_burst(args.tasks * 4, seed=7) if d.queue == queue][: args.tasks]
    with (
        redis_url() as url,
        CustomsSim(rate=5000.0, burst=500) as customs,
        TosSim(max_connections=64, service_s=0.0) as tos,
    ):
        env = {
            "TIDEGATE_REDIS_URL": url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_CUSTOMS_RATE": "5000",
            "TIDEGATE_CUSTOMS_BURST": "500",
            "TIDEGATE_TOS_RATE": "100000",
            "TIDEGATE_TOS_BURST": "1000",
            "TIDEGATE_TOS_CONCURRENCY": "64",
            "CHILD_HEAP_DIR": str(heap_dir),
            "CHILD_HEAP_AT": args.at,
            "CHILD_HEAP_TRACE": "0" if args.no_trace else "1",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        fleet = Fleet(
            "memory_apps.child_probe",
            [Pool(args.pool, [queue], concurrency=args.concurrency)],
            env=env,
            log_dir=heap_dir,
        )
        producer = Celery(broker=url)
        client = client_from_url(url)
        outstanding = Outstanding(client, prefix=prefix)
        untrack = track_publishes([TASKS[args.pool]], outstanding, app=producer)
        fleet.start()
        try:
            with producer.connection_for_write() as conn:
                for doc in docs:
                    producer.send_task(
                        TASKS[args.pool], args=[doc.envelope()], queue=queue, connection=conn
                    )
            sim: Any = tos if args.pool == "tos" else customs
            deadline = time.monotonic() + 1800
            while sim.stats(timeline=False)["distinct_keys"] < len(docs):
                if time.monotonic() > deadline:
                    raise SystemExit("not delivered in time")
                time.sleep(1.0)
        finally:
            untrack()
            fleet.stop()
            producer.close()
            client.close()
    print(f"snapshots in {heap_dir}")
    _show(heap_dir, str(at[0]), str(at[-1]), at[-1] - at[0], args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
