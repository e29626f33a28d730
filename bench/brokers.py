"""The vessel burst and its chaos runs on both brokers, side by side, in one run (issue 15).

Each pair runs the same scenario twice, once with the Redis broker (the embedded
Redis carries the messages) and once with RabbitMQ (a vhost of the run's own; the
gate, parking, ledger and DLQ stay on Redis):

- ``vessel``: the demo's berthing burst (``tidegate demo`` / ``--broker amqp://…``);
- ``kill-workers``: SIGKILL pool children and worker mains through the burst;
- restart: ``redis-restart`` on the Redis broker, ``broker-restart`` (RabbitMQ
  SIGKILLed and booted again) on RabbitMQ — each broker's own crash.

Without ``--amqp`` a private RabbitMQ node is started for the run (never the shared
one). The verdict of every row is the per-key reconciliation (lost, accepted twice);
the customs drain is the time between its first and last acceptance over the ideal
(documents / rate).

    .venv/bin/python bench/brokers.py                         # ~15 min on 2 shared cores
    .venv/bin/python bench/brokers.py --vessel 500 --kill 1000 --restart 1000

Writes ``bench/results/brokers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _harness import (
    CpuWatch,
    describe_interference,
    machine_info,
    machine_markdown,
    md_table,
    write_json,
)
from tidegate.harness.chaos import preset, public, run_chaos
from tidegate.harness.rabbit_node import RABBITMQ_BIN, RabbitNode
from tidegate.harness.run_broker import open_amqp_broker
from tidegate.harness.scenarios.vessel import VesselConfig, run_vessel_demo
from tidegate.logging import configure as configure_logging
from tidegate.redis_server import EmbeddedRedis

COLUMNS = (
    ("run", "run"),
    ("broker", "broker"),
    ("submitted", "submitted"),
    ("delivered", "delivered"),
    ("dead_lettered", "dead-lettered"),
    ("pending", "pending"),
    ("lost", "lost"),
    ("accepted_twice", "accepted twice"),
    ("customs_429", "customs 429"),
    ("drain_ratio", "customs drain / ideal"),
    ("elapsed_s", "elapsed s"),
    ("checks", "checks"),
)


def _row(run: str, report: dict[str, Any]) -> dict[str, Any]:
    customs = report["downstreams"]["customs"]
    ratio = customs["drain_s"] / customs["ideal_s"] if customs["ideal_s"] else None
    chaos = report.get("chaos")
    failed = [c["name"] for c in chaos["checks"] if not c["ok"]] if chaos else []
    return {
        "run": run,
        "broker": report["broker"],
        "submitted": report["submitted"],
        "delivered": report["delivered"],
        "dead_lettered": report["dead_lettered"],
        "pending": report["pending"],
        "lost": report["lost"],
        "accepted_twice": report["accepted_twice"],
        "customs_429": customs["responses_429"],
        "drain_ratio": round(ratio, 3) if ratio is not None else None,
        "elapsed_s": report["elapsed_s"],
        "checks": "—"
        if chaos is None
        else ("FAILED: " + ", ".join(failed) if failed else "all held"),
    }


@contextlib.contextmanager
def _amqp(url: str | None) -> Iterator[tuple[str, str | None]]:
    """The RabbitMQ to use: ``url`` as given, else a private node for this run."""
    if url is not None:  # "-": none needed
        yield url, None
        return
    node = RabbitNode()
    try:
        node.start()
        yield node.url(), node.management_url
    finally:
        node.cleanup()


def _vessel(interchanges: int, amqp: str | None, management: str | None) -> dict[str, Any]:
    config = VesselConfig(interchanges=interchanges)
    server = EmbeddedRedis().start()
    try:
        if amqp is None:
            report, _ = run_vessel_demo(server.url, config)
        else:
            broker = open_amqp_broker(amqp, management_url=management)
            try:
                report, _ = run_vessel_demo(server.url, config, broker=broker)
            finally:
                broker.close()
    finally:
        server.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--amqp", help="a RabbitMQ to use (default: a private node)")
    parser.add_argument("--vessel", type=int, default=2000, help="vessel burst interchanges")
    parser.add_argument("--kill", type=int, default=3000, help="kill-workers interchanges")
    parser.add_argument("--restart", type=int, default=3000, help="restart interchanges")
    parser.add_argument(
        "--only", default="vessel,kill,restart", help="pairs to run (default: %(default)s)"
    )
    parser.add_argument("--out", default="bench/results/brokers.json")
    args = parser.parse_args(argv)

    configure_logging(level="ERROR")
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    info = machine_info(packages=("celery", "kombu", "redis", "httpx"))
    version = subprocess.run(
        [str(RABBITMQ_BIN / "rabbitmqctl"), "version"], check=False, capture_output=True, text=True
    ).stdout.strip()
    info["rabbitmq"] = version or "unknown"
    print(f"brokers benchmark on {info['nproc']} CPUs, {info['date_utc']}: {command}", flush=True)
    started = time.time()
    rows: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    notes: list[str] = []

    def record(run: str, report: dict[str, Any], watch: CpuWatch) -> None:
        report["interference"] = watch.stop()
        reports.append(public(report))
        rows.append(_row(run, report))
        notes.append(
            f"{run} on {report['broker']}: {describe_interference(report['interference'])}"
        )
        print(f"  {rows[-1]}", flush=True)
        write_json(args.out, {"benchmark": "brokers", "partial": True, "table": rows})

    pairs = set(args.only.split(","))
    # broker-restart starts its own node; vessel and kill need one for the run.
    with _amqp(args.amqp if pairs & {"vessel", "kill"} else "-") as (amqp_url, management):
        for broker in ("redis", "amqp") if "vessel" in pairs else ():
            watch = CpuWatch()
            url = amqp_url if broker == "amqp" else None
            record(f"vessel {args.vessel}", _vessel(args.vessel, url, management), watch)
        kill = preset("kill-workers").tuned(interchanges=args.kill)
        for broker in ("redis", "amqp") if "kill" in pairs else ():
            watch = CpuWatch()
            if broker == "amqp" and management is not None:
                os.environ["RABBITMQ_MANAGEMENT_URL"] = management
            report, _ = run_chaos(kill, broker_url=amqp_url if broker == "amqp" else None)
            record(f"kill-workers {args.kill}", report, watch)
    for kind in ("redis-restart", "broker-restart") if "restart" in pairs else ():
        watch = CpuWatch()
        config = preset(kind).tuned(interchanges=args.restart)
        report, _ = run_chaos(config)
        record(f"{kind} {args.restart}", report, watch)

    total = time.time() - started
    out = ["## Brokers side by side", "", machine_markdown(info), "", f"`{command}`", ""]
    out.append(md_table([h for _, h in COLUMNS], [[r[k] for k, _ in COLUMNS] for r in rows]))
    out += ["", *[f"- _{n}_" for n in notes], "", f"_total {total:.0f} s; JSON: {args.out}_"]
    print("\n" + "\n".join(out))
    write_json(
        args.out,
        {
            "benchmark": "brokers",
            "command": command,
            "machine": info,
            "total_s": round(total, 1),
            "table": rows,
            "runs": reports,
        },
    )
    return 0 if all(r["lost"] == 0 and r["accepted_twice"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
