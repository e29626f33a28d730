"""``tidegate demo``: see the flow control work, end to end, on this machine."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from tidegate.cli._output import console as make_console
from tidegate.redis_server import redis_url

__all__ = ["CHAOS_KINDS", "demo"]

#: ``--chaos`` choices: the scenarios of :mod:`tidegate.ops.chaos` (kept literal so the
#: CLI starts without importing Celery).
CHAOS_KINDS = ("kill-workers", "redis-restart", "downstream-outage", "slow-downstream", "poison")


def _live_table(sample: Any, submitted: int, limits: dict[str, float]) -> Table:
    table = Table(title=f"vessel burst — t = {sample.t:5.1f} s", expand=False)
    for column in ("queue / downstream", "waiting", "accepted", "limit/s"):
        table.add_column(column, justify="right" if column != "queue / downstream" else "left")
    table.add_row(
        "edi.customs → customs",
        str(sample.depth.get("edi.customs", 0)),
        str(sample.accepted["customs"]),
        f"{limits['customs']:g}",
    )
    table.add_row(
        "edi.tos → tos",
        str(sample.depth.get("edi.tos", 0)),
        str(sample.accepted["tos"]),
        f"{limits['tos']:g}",
    )
    settled = sum(sample.accepted.values()) + sample.dead_lettered
    table.caption = (
        f"settled {settled}/{submitted} · parked {sample.parked} · dead-lettered "
        f"{sample.dead_lettered} · 429s {sample.responses_429} · 503s {sample.responses_503} "
        f"· workers {sample.rss_mb:.0f} MiB (largest process {sample.largest_process_mb:.0f})"
    )
    return table


def _report_table(report: dict[str, Any]) -> Group:
    summary = Table(title="outcome", show_header=False)
    for key in (
        "submitted",
        "delivered",
        "dead_lettered",
        "quarantined",
        "pending",
        "lost",
        "duplicates",
        "peak_worker_rss_mb",
        "elapsed_s",
    ):
        summary.add_row(key, str(report[key]))
    per = Table(title="downstreams")
    per.add_column("")
    names = list(report["downstreams"])
    for name in names:
        per.add_column(name, justify="right")
    for field in (
        "accepted",
        "responses_429",
        "responses_503",
        "limit_per_s",
        "max_accepted_1s",
        "drain_s",
        "ideal_s",
        "utilisation",
    ):
        per.add_row(field, *(str(report["downstreams"][n][field]) for n in names))
    return Group(summary, per)


@click.command()
@click.option(
    "--scenario",
    type=click.Choice(["vessel", "bulk", "overload", "gate"]),
    default="vessel",
    show_default=True,
    help="vessel: a berthing burst through Celery workers and the gates; "
    "bulk: an IFCSUM fanned out per B/L, 1 % poison, fix and replay; "
    "overload: sheddable bulk documents and VERMAS together, shed and replayed; "
    "gate: several processes through one rate limit.",
)
@click.option(
    "--bls",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    help="bulk: consignments (B/Ls) in the manifest.",
)
@click.option(
    "--interchanges",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    help="vessel: interchanges in the berthing burst (with --chaos: the scenario size).",
)
@click.option(
    "--customs-rate",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="The customs gateway's real per-second rate.",
)
@click.option(
    "--customs-burst",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="The customs gateway's bucket size.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    help="Processes in the customs pool (the TOS pool gets twice as many).",
)
@click.option(
    "--vermas",
    type=click.IntRange(0),
    default=500,
    show_default=True,
    help="overload: VERMAS declarations (never shed).",
)
@click.option(
    "--bulk",
    type=click.IntRange(0),
    default=5000,
    show_default=True,
    help="overload: sheddable bulk documents.",
)
@click.option(
    "--seed", type=int, default=7, show_default=True, help="Seed of the generated documents."
)
@click.option(
    "--chaos",
    "chaos_kind",
    type=click.Choice(CHAOS_KINDS),
    help="vessel: break one thing during a full-size burst and check that nothing is lost "
    "(tidegate.ops.chaos; its own embedded Redis; --interchanges overrides the size).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the machine-readable report here.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a PNG of queue depth and call rate here.",
)
def demo(
    scenario: str,
    bls: int,
    interchanges: int,
    customs_rate: float,
    customs_burst: int,
    workers: int,
    vermas: int,
    bulk: int,
    seed: int,
    chaos_kind: str | None,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Run a demonstration on an embedded Redis (or REDIS_URL); stops all it starts."""
    console = make_console()
    if chaos_kind is not None:
        if scenario != "vessel":
            raise click.UsageError("--chaos applies to --scenario vessel")
        source = click.get_current_context().get_parameter_source("interchanges")
        given = interchanges if source is click.core.ParameterSource.COMMANDLINE else None
        _chaos_scenario(console, chaos_kind, given, json_path)
        return
    if scenario == "gate":
        _gate_scenario(console, json_path)
        return
    if scenario == "bulk":
        _bulk_scenario(console, bls, workers, seed, json_path)
        return
    if scenario == "overload":
        _overload_scenario(
            console, vermas, bulk, customs_rate, customs_burst, workers, seed, json_path
        )
        return
    from tidegate.ops.vessel_demo import VesselConfig, run_vessel_demo

    config = VesselConfig(
        interchanges=interchanges,
        customs_rate=customs_rate,
        customs_burst=customs_burst,
        workers=workers,
        seed=seed,
    )
    limits = {"customs": customs_rate, "tos": config.tos_connections / config.tos_service_s}
    log_dir = Path(tempfile.mkdtemp(prefix="tidegate-demo-"))
    console.print(
        f"[bold]A vessel berths:[/] {interchanges} interchanges hit {workers} customs and "
        f"{workers * 2} TOS worker processes. Customs accepts {customs_rate:g}/s "
        f"(burst {customs_burst}); the TOS {config.tos_connections} connections."
    )
    with redis_url() as url, Live(console=console, refresh_per_second=4) as live:
        report, samples = run_vessel_demo(
            url,
            config,
            log_dir=log_dir,
            on_sample=lambda s, n: live.update(_live_table(s, n, limits)),
        )
    console.print(_report_table(report))
    customs = report["downstreams"]["customs"]
    console.print(
        f"customs: {customs['responses_429']} × 429, drained in {customs['drain_s']} s "
        f"({customs['drain_s'] / customs['ideal_s']:.3f} × ideal) · lost {report['lost']} · "
        f"duplicates {report['duplicates']} · worker logs in {log_dir}"
        if customs["ideal_s"]
        else f"worker logs in {log_dir}"
    )
    if plot_path is not None:
        from tidegate.ops.plot import plot_run

        console.print(f"plot: {plot_run(report, samples, plot_path)}")
    if json_path is not None:
        public = {k: v for k, v in report.items() if not k.startswith("_")}
        json_path.write_text(json.dumps(public, indent=2) + "\n", encoding="utf-8")
        console.print(f"report: {json_path}")


def _bulk_table(sample: Any, submitted: int) -> Table:
    table = Table(title=f"manifest fan-out — t = {sample.t:5.1f} s")
    table.add_column("queue")
    table.add_column("waiting", justify="right")
    for queue in ("bulk.dispatch", "bl.parse", "edi.tos"):
        table.add_row(queue, str(sample.depth.get(queue, 0)))
    table.caption = (
        f"TOS has {sample.accepted['tos']}/{submitted} B/Ls · dead-lettered "
        f"{sample.dead_lettered} · workers {sample.rss_mb:.0f} MiB"
    )
    return table


def _bulk_scenario(
    console: Console, bls: int, workers: int, seed: int, json_path: Path | None
) -> None:
    from tidegate.ops.bulk_demo import BulkConfig, run_bulk_demo

    config = BulkConfig(bls=bls, workers=workers, seed=seed)
    console.print(
        f"[bold]A consolidated manifest arrives:[/] {bls} consignments; 1 % name a consignee "
        "the TOS does not know yet. Fan-out, dead letters, fix, replay…"
    )
    with redis_url() as url, Live(console=console, refresh_per_second=4) as live:
        report, _ = run_bulk_demo(
            url, config, on_sample=lambda s, n: live.update(_bulk_table(s, n))
        )
    table = Table(title="bulk outcome", show_header=False)
    for key in (
        "submitted",
        "delivered",
        "dead_lettered",
        "replayed",
        "dead_lettered_after_replay",
        "lost",
        "duplicates",
        "fan_out_s",
        "bls_per_s",
        "elapsed_s",
        "peak_worker_rss_mb",
        "batch",
    ):
        table.add_row(key, str(report[key]))
    console.print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        console.print(f"report: {json_path}")


def _overload_scenario(
    console: Console,
    vermas: int,
    bulk: int,
    customs_rate: float,
    customs_burst: int,
    workers: int,
    seed: int,
    json_path: Path | None,
) -> None:
    from tidegate.logging import configure as configure_logging
    from tidegate.ops.overload_demo import (
        OverloadConfig,
        live_table,
        report_table,
        run_overload_demo,
    )

    config = OverloadConfig(
        vermas=vermas,
        bulk=bulk,
        customs_rate=customs_rate,
        customs_burst=customs_burst,
        customs_workers=workers,
        seed=seed,
    )
    log_dir = Path(tempfile.mkdtemp(prefix="tidegate-overload-"))
    # The monitor runs in this process: its JSON events go to a file, not over the live view.
    monitor_log = (log_dir / "monitor.log").open("a", encoding="utf-8")
    configure_logging(level="INFO", stream=monitor_log)
    console.print(
        f"[bold]A surge the fleet cannot absorb:[/] {bulk} bulk B/L PDFs (sheddable) and "
        f"{vermas} VERMAS (never shed); customs {customs_rate:g}/s, document store "
        f"{config.docstore_rate:g}/s; HWM {config.hwm}, LWM {config.lwm}."
    )
    try:
        with redis_url() as url, Live(console=console, refresh_per_second=4) as live:
            report, _ = run_overload_demo(
                url, config, log_dir=log_dir, on_sample=lambda s, n: live.update(live_table(s, n))
            )
    finally:
        configure_logging(level="WARNING", stream=sys.stderr)
        monitor_log.close()
    console.print(report_table(report))
    console.print(f"worker and monitor logs in {log_dir}")
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _gate_scenario(console: Console, json_path: Path | None) -> None:
    from tidegate.ops.gate_demo import run_gate_demo

    with redis_url() as url:
        console.print("[bold]4 processes[/] push 120 documents through one gate of 20/s…")
        report = run_gate_demo(url).as_dict()
    table = Table(title="fleet-wide gate", show_header=False)
    for key, value in report.items():
        table.add_row(key, str(value))
    console.print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _chaos_scenario(
    console: Console, kind: str, interchanges: int | None, json_path: Path | None
) -> None:
    import dataclasses

    from tidegate.ops.chaos import preset, public, run_chaos, summary_row

    config = preset(kind)
    if interchanges is not None:
        config = dataclasses.replace(config, interchanges=interchanges)
    limits = {"customs": config.customs_rate, "tos": config.tos_connections / config.tos_service_s}
    console.print(
        f"[bold]Chaos — {kind}:[/] {config.interchanges} interchanges, fault at "
        f"t = {config.fault_at_s:g} s."
    )
    with Live(console=console, refresh_per_second=4) as live:
        report, _ = run_chaos(config, on_sample=lambda s, n: live.update(_live_table(s, n, limits)))
    table = Table(title=f"chaos: {kind}", show_header=False)
    for key, value in summary_row(report).items():
        table.add_row(key, str(value))
    for check in report["chaos"]["checks"]:
        table.add_row(
            ("held: " if check["ok"] else "FAILED: ") + check["name"], str(check["observed"])
        )
    console.print(table)
    console.print(f"worker logs in {report['log_dir']}")
    if json_path is not None:
        json_path.write_text(json.dumps(public(report), indent=2) + "\n", encoding="utf-8")
        console.print(f"report: {json_path}")
