"""A demo report as a person reads it: the JSON's own names, the figures aligned.

The JSON report is the record and the end table is the same record on a terminal, so an
operator who reads ``delivered 2000`` there finds ``"delivered": 2000`` in the file. A
row is named by the JSON path of its value (``shed_by_class.BULK_BL_PDF``), a nested
mapping becomes one row per leaf (never a Python ``{...}``), and figures are
right-aligned so that a column of them compares at a glance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rich.table import Table

__all__ = [
    "SUMMARY_KEYS",
    "checks_table",
    "downstreams_table",
    "end_tables",
    "figure",
    "leaves",
    "public",
    "summary_table",
]

#: The rows of each scenario's outcome table, as top-level report keys; a nested value
#: expands to one row per leaf. ``chaos`` covers every ``chaos:<kind>`` report.
SUMMARY_KEYS: dict[str, tuple[str, ...]] = {
    "vessel": (
        "submitted",
        "delivered",
        "dead_lettered",
        "quarantined",
        "refused_at_intake",
        "pending",
        "lost",
        "duplicates",
        "peak_worker_rss_mb",
        "elapsed_s",
        "intake",
    ),
    "chaos": (
        "submitted",
        "delivered",
        "dead_lettered",
        "refused_at_intake",
        "pending",
        "lost",
        "duplicates",
        "peak_worker_rss_mb",
        "elapsed_s",
        "ok",
    ),
    "adaptive": (
        "submitted",
        "delivered",
        "dead_lettered",
        "pending",
        "lost",
        "accepted_twice",
        "duplicates",
        "elapsed_s",
    ),
    "bulk": (
        "submitted",
        "delivered",
        "dead_lettered",
        "replayed",
        "dead_lettered_after_replay",
        "lost",
        "duplicates",
        "fan_out_s",
        "bls_per_s",
        "aggregate_s",
        "elapsed_s",
        "peak_worker_rss_mb",
        "batch",
    ),
    "overload": (
        "submitted",
        "delivered",
        "dead_lettered",
        "pending",
        "lost",
        "duplicates",
        "shed_by_class",
        "replayed",
        "vermas_quarantined",
        "ordering",
        "peak_worker_rss_mb",
        "elapsed_s",
    ),
    "gate": (
        "processes",
        "rate",
        "burst",
        "admitted",
        "elapsed_s",
        "ceiling",
        "over_ceiling",
        "max_in_any_1s",
        "allowed_in_any_1s",
        "per_process",
    ),
}


def public(value: Any) -> Any:
    """``value`` without the bulky ``_``-prefixed entries (raw timelines), at any depth:
    what a JSON report holds."""
    if isinstance(value, Mapping):
        return {k: public(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, list):
        return [public(v) for v in value]
    return value


def figure(value: Any) -> str:
    """One value as a table cell: plain numbers, ``-`` for none, ``k=v`` pairs, lists
    joined — never a Python repr, which an operator would have to parse."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return f"{value:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={figure(v)}" for k, v in value.items()) or "-"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ", ".join(figure(v) for v in value) or "-"
    return str(value)


def leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(json.path, value)`` for every leaf under ``path`` (a non-empty mapping is a
    branch; anything else, an empty mapping included, is a leaf)."""
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from leaves(child, f"{path}.{key}")
    else:
        yield path, value


def _kind(report: Mapping[str, Any]) -> str:
    scenario = str(report.get("scenario", "vessel"))
    return "chaos" if scenario.startswith("chaos:") else scenario


def summary_table(report: Mapping[str, Any], title: str = "outcome") -> Table:
    """The scenario's headline figures, one row per JSON leaf, values right-aligned."""
    table = Table(title=title)
    table.add_column("report key")
    table.add_column("value", justify="right")
    for key in SUMMARY_KEYS[_kind(report)]:
        if key in report:
            for path, value in leaves(report[key], key):
                table.add_row(path, figure(value))
    return table


def downstreams_table(report: Mapping[str, Any]) -> Table | None:
    """``report["downstreams"]`` side by side: one column per downstream, one row per
    field (the JSON's field names); ``None`` when the report has no downstreams."""
    downstreams: Mapping[str, Mapping[str, Any]] = report.get("downstreams") or {}
    if not downstreams:
        return None
    table = Table(title="downstreams")
    table.add_column("field")
    for name in downstreams:
        table.add_column(name, justify="right")
    fields: list[str] = []
    for stats in downstreams.values():
        fields.extend(f for f in stats if f not in fields)
    for field in fields:
        table.add_row(field, *(figure(stats.get(field)) for stats in downstreams.values()))
    return table


def checks_table(checks: Sequence[Mapping[str, Any]], title: str = "checks") -> Table:
    """A chaos run's verdict: each check, whether it held, what was seen, the bound."""
    table = Table(title=title)
    table.add_column("check")
    table.add_column("held")
    table.add_column("observed", justify="right")
    table.add_column("bound", justify="right")
    for check in checks:
        table.add_row(
            str(check["name"]),
            "held" if check["ok"] else "FAILED",
            figure(check["observed"]),
            figure(check.get("bound")),
        )
    return table


def end_tables(report: Mapping[str, Any]) -> list[Table]:
    """Every table the demo prints when a run ends, in order."""
    tables = [summary_table(report, title=f"{report.get('scenario', 'vessel')}: outcome")]
    downstreams = downstreams_table(report)
    if downstreams is not None:
        tables.append(downstreams)
    chaos = report.get("chaos")
    if isinstance(chaos, Mapping) and "checks" in chaos:
        tables.append(checks_table(chaos["checks"], title=f"checks: {chaos.get('name', '')}"))
    return tables
