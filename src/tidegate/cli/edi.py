"""``tidegate edi``: inspect EDIFACT files and split manifests per Bill of Lading.

Thin on purpose: the reports are built by :mod:`tidegate.edi.inspect` and the units by
:class:`tidegate.edi.Intake`; this module only renders them. ``inspect`` exits 0 when
every file was read and has no error finding; 1 when any file could not be read as
EDIFACT (its ``error`` says why); 3 when every file was read but one has an error
finding (its data may be wrong or incomplete) — so a script can tell "bad file" from
"file with problems" and neither passes as clean. Warnings alone exit 0.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tidegate.cli._common import TidegateCLIError, echo_json
from tidegate.cli._output import console, print_table
from tidegate.edi import BLUnit, EdifactError, Intake, inspect_path, read_chunks
from tidegate.edi.inspect import has_errors

__all__ = ["EXIT_ERROR_FINDINGS", "EXIT_UNREADABLE", "edi"]

#: ``edi inspect``: a file could not be read as EDIFACT.
EXIT_UNREADABLE = 1
#: ``edi inspect``: every file was read, and one has an error-severity finding.
EXIT_ERROR_FINDINGS = 3

#: Groups of identical findings shown per file in the human view; ``--json`` has all.
_SHOWN_FINDINGS = 40

_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


@click.group()
def edi() -> None:
    """Read EDIFACT interchanges: inspect, split manifests per Bill of Lading."""


@edi.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file, as an array.")
@click.pass_context
def inspect(ctx: click.Context, files: tuple[Path, ...], as_json: bool) -> None:
    """Count interchanges, messages, consignments and containers; list findings, identical
    ones once with a count.

    Exit status: 0 clean (warnings allowed), 1 a file is not readable EDIFACT, 3 a file
    has an error finding.
    """
    reports = [inspect_path(path) for path in files]
    if as_json:
        echo_json(reports)
    else:
        out = console()
        for report in reports:
            _render_report(out, report)
    if any(report["error"] is not None for report in reports):
        ctx.exit(EXIT_UNREADABLE)
    if any(has_errors(report) for report in reports):
        ctx.exit(EXIT_ERROR_FINDINGS)


def _render_report(out: Console, report: dict[str, Any]) -> None:
    out.print(report["file"], style="bold", markup=False)
    table = Table(show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    if report["error"] is not None:
        error = report["error"]
        table.add_row("error", f"[red]{error['code']}[/red]: {error['message']}")
    messages = ", ".join(f"{kind or '(empty)'} x{n}" for kind, n in report["messages"].items())
    classes = ", ".join(f"{name} x{n}" for name, n in report["classes"].items())
    containers = report["containers"]
    severities = Counter(finding["severity"] for finding in report["findings"])
    table.add_row("interchanges", str(report["interchanges"]))
    table.add_row("messages", messages or "0")
    table.add_row("classes", classes or "-")
    table.add_row("segments", str(report["segments"]))
    table.add_row("consignments", str(report["consignments"]))
    table.add_row("B/L units", f"{report['bl_units']} ({report['dead_letter_units']} dead-letter)")
    table.add_row(
        "containers",
        f"{containers['total']} ({containers['valid']} valid, {containers['invalid']} invalid)",
    )
    table.add_row(
        "findings",
        ", ".join(f"{severities[s]} {s}" for s in ("error", "warning", "info") if severities[s])
        or "none",
    )
    print_table(out, table)
    groups = report["finding_groups"]
    if groups:
        findings = Table(show_lines=False)
        for column in ("severity", "code", "count", "first segment", "offset", "message"):
            findings.add_column(column)
        for group in groups[:_SHOWN_FINDINGS]:
            style = _SEVERITY_STYLE.get(group["severity"], "")
            findings.add_row(
                f"[{style}]{group['severity']}[/{style}]",
                group["code"],
                str(group["count"]),
                str(group["segment_index"]),
                str(group["offset"]),
                escape(group["message"]),
            )
        print_table(out, findings)
        hidden = len(groups) - _SHOWN_FINDINGS
        if hidden > 0:
            out.print(f"... {hidden} more kinds of finding (use --json for all)")
    out.print()


@edi.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The units as a JSON array.")
@click.option("--raw", is_flag=True, help="Include each unit's raw segment text.")
def split(file: Path, as_json: bool, raw: bool) -> None:
    """Carve the IFCSUM manifests in FILE into one unit per Bill of Lading."""
    units: list[BLUnit] = []
    try:
        for result in Intake(read_chunks(file)):
            units.extend(result.units)
    except EdifactError as exc:
        raise TidegateCLIError(f"{file}: {exc}") from exc
    if as_json:
        echo_json([unit.to_dict(raw=raw) for unit in units])
        return
    out = console()
    if not units:
        out.print(f"{file}: no IFCSUM consignment")
        return
    out.print(f"{file}: {len(units)} B/L units", style="bold", markup=False)
    table = Table()
    for column in ("#", "consignment", "B/L", "source", "containers", "key", "dead letter"):
        table.add_column(column)
    for unit in units:
        table.add_row(
            str(unit.position),
            unit.consignment_number,
            unit.bl_number or "-",
            unit.bl_source or "-",
            " ".join(c.normalised for c in unit.containers) or "-",
            unit.idempotency_key,
            f"[red]{unit.dead_letter_reason}[/red]" if unit.dead_letter_reason else "",
        )
    print_table(out, table)
    if raw:
        for unit in units:
            out.print(f"--- unit {unit.position}", markup=False)
            out.print(unit.raw, markup=False)
