"""``tidegate demo``: see the flow control work, end to end, on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from tidegate.redis_server import redis_url

__all__ = ["demo"]


@click.command()
@click.option(
    "--scenario",
    type=click.Choice(["gate"]),
    default="gate",
    show_default=True,
    help="gate: several processes through one fleet-wide rate limit.",
)
@click.option("--processes", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0.01), default=20.0, show_default=True)
@click.option("--burst", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--documents", type=click.IntRange(min=1), default=120, show_default=True)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the report as JSON to this file.",
)
def demo(
    scenario: str, processes: int, rate: float, burst: int, documents: int, json_path: Path | None
) -> None:
    """Run a demonstration on an embedded Redis (or REDIS_URL)."""
    from tidegate.ops.gate_demo import run_gate_demo

    console = Console()
    with redis_url() as url:
        console.print(
            f"[bold]{processes} processes[/] push {documents} documents through one gate "
            f"of {rate}/s, burst {burst}…"
        )
        report = run_gate_demo(
            url, processes=processes, rate=rate, burst=burst, documents=documents
        ).as_dict()
    table = Table(title="fleet-wide gate", show_header=False)
    for key, value in report.items():
        table.add_row(key, str(value))
    console.print(table)
    verdict = "never above" if report["over_ceiling"] == 0 else "ABOVE"
    console.print(f"admitted {report['admitted']} in {report['elapsed_s']}s: {verdict} the ceiling")
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
