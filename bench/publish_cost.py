"""What publish tracking costs per Celery publish: separate scripts against one.

    .venv/bin/python bench/publish_cost.py [--units 4000] [--block 200] [--batch 100]
        [--out bench/results/publish_cost.json]

One Celery app on tidegate's broker channel (``install_write_tolerant_broker``), one Redis
for the broker and tidegate, the same vessel-burst documents published with
``send_task`` in blocks of ``--block``, the modes interleaved block by block in one
process (so a slower minute of the shared machine hits every mode alike):

- **untracked**: no tracking (kombu's LPUSH only), the floor;
- **separate**: tracking without the app (``track_publishes(names, registry)``): the
  unit is recorded by one script before the LPUSH and confirmed by another after it
  (three round trips), as every tracked publish did before;
- **one script**: tracking with the app (``track_publishes(names, registry, app=app)``):
  record, LPUSH and confirm as one script in place of kombu's LPUSH (one round trip).

Then the same three inside kombu publish batches of ``--batch`` (the intake's publish
thread). Per mode: publishes per second (median over blocks, and its range), Redis
scripts run per publish (``INFO commandstats``), and the ratio to ``separate``: the
median over blocks of each block's rate over the ``separate`` block run next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from celery import Celery

from _harness import machine_info, md_table, med, write_json
from tidegate._redis import client_from_url
from tidegate.harness.burst import vessel_burst
from tidegate.integrations.celery.broker import install_write_tolerant_broker
from tidegate.integrations.celery.sweep import track_publishes
from tidegate.load.outstanding import Outstanding
from tidegate.redis_server import redis_url

TASK = "edi.tos.push"
QUEUE = "bench.publish"
MODES = ("untracked", "separate", "one script")


def _scripts(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("eval", "evalsha"))


def _block(app: Celery, docs: list[Any], batch: int) -> float:
    """Seconds to publish ``docs`` (in kombu batches of ``batch`` when > 0)."""
    start = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for first in range(0, len(docs), batch or len(docs)):
            chunk = docs[first : first + (batch or len(docs))]
            with producer.batch(max_size=batch) if batch else nullcontext():
                for doc in chunk:
                    app.send_task(TASK, args=[doc.envelope()], queue=QUEUE, producer=producer)
    return time.perf_counter() - start


def run(url: str, units: int, block: int, batch: int) -> dict[str, Any]:
    client = client_from_url(url)
    app = Celery("publish-cost", broker=url, set_as_current=False)
    install_write_tolerant_broker(app)
    outstanding = Outstanding(client, prefix="bench-publish")
    trackers: dict[str, Callable[[], Callable[[], None]]] = {
        "untracked": lambda: lambda: None,
        "separate": lambda: track_publishes([TASK], outstanding),
        "one script": lambda: track_publishes([TASK], outstanding, app=app),
    }
    docs = list(vessel_burst(block, seed=5))
    _block(app, docs[:20], batch)  # connection and queue declared before timing
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    scripts = dict.fromkeys(MODES, 0)
    for _ in range(max(1, units // block)):
        for mode in MODES:
            untrack = trackers[mode]()
            try:
                before = _scripts(client)
                seconds = _block(app, docs, batch)
                scripts[mode] += _scripts(client) - before
            finally:
                untrack()
            rates[mode].append(len(docs) / seconds)
        client.delete(QUEUE)
    for key in client.scan_iter(match="bench-publish:*", count=1000):
        client.delete(key)
    app.close()
    client.close()
    per_mode = {
        mode: {
            "publishes_per_s": round(med(rates[mode])),
            "range": [round(min(rates[mode])), round(max(rates[mode]))],
            "scripts_per_publish": round(scripts[mode] / (len(docs) * len(rates[mode])), 3),
            "blocks": len(rates[mode]),
        }
        for mode in MODES
    }
    for mode in MODES:  # paired: each block against the "separate" block next to it
        pairs = [r / b for r, b in zip(rates[mode], rates["separate"], strict=True)]
        per_mode[mode]["ratio_to_separate"] = round(med(pairs), 2)
    return {"batch": batch, "block": block, "modes": per_mode}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=4_000)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--out", default="bench/results/publish_cost.json")
    args = parser.parse_args(argv)
    with redis_url() as url:
        runs = [run(url, args.units, args.block, 0)]
        print(json.dumps(runs[-1]), flush=True)
        runs.append(run(url, args.units, args.block, args.batch))
        print(json.dumps(runs[-1]), flush=True)
        machine = machine_info(client_from_url(url), ["celery", "kombu", "redis"])
    rows = [
        [
            "one by one" if r["batch"] == 0 else f"batches of {r['batch']}",
            mode,
            f"{m['publishes_per_s']:,} ({m['range'][0]:,}–{m['range'][1]:,})",
            m["scripts_per_publish"],
            f"×{m['ratio_to_separate']}",
        ]
        for r in runs
        for mode, m in r["modes"].items()
    ]
    print(
        md_table(
            ["publish", "tracking", "publishes/s (range)", "scripts/publish", "vs separate"], rows
        )
    )
    write_json(
        args.out,
        {
            "benchmark": "publish_cost",
            "command": "python bench/publish_cost.py " + " ".join(argv or sys.argv[1:]),
            "machine": machine,
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
