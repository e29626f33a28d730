"""The report behind ``tidegate edi inspect``: counts and findings for one file.

Kept apart from the CLI so that the report is a plain dict that tests, the CLI and any
future HTTP endpoint build the same way. A file that cannot be read, or is not EDIFACT,
still gets a report: its ``error`` says why, and the counts cover what was read before.

A manifest with 36 consignments lacking a B/L has 36 identical findings; an operator
needs to read that once, with its count, not scroll past 36 rows. So the report also
groups identical findings (same severity, code and message) in ``finding_groups``;
``findings`` keeps every one with its location.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tidegate.edi.classify import DEFAULT_ROUTES, Route
from tidegate.edi.errors import EdifactError
from tidegate.edi.findings import DEFAULT_POLICY, Finding, FindingCap, FindingPolicy
from tidegate.edi.intake import Intake
from tidegate.edi.sources import read_chunks

__all__ = ["group_findings", "has_errors", "inspect_path", "inspect_source"]

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def group_findings(findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Identical findings as one entry each, worst severity first, then by first place.

    Returns:
        dicts with ``severity``, ``code``, ``message``, ``count`` and the
        ``segment_index`` / ``offset`` of the first occurrence.
    """
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for finding in findings:
        key = (finding["severity"], finding["code"], finding["message"])
        group = groups.get(key)
        if group is None:
            groups[key] = {
                "severity": finding["severity"],
                "code": finding["code"],
                "message": finding["message"],
                "count": 1,
                "segment_index": finding["segment_index"],
                "offset": finding["offset"],
            }
        else:
            group["count"] += 1
    return sorted(
        groups.values(),
        key=lambda g: (
            _SEVERITY_ORDER.get(g["severity"], len(_SEVERITY_ORDER)),
            -1 if g["segment_index"] is None else g["segment_index"],
        ),
    )


def has_errors(report: dict[str, Any]) -> bool:
    """Whether ``report`` has an error-severity finding (the data may be wrong)."""
    return any(finding["severity"] == "error" for finding in report["findings"])


def inspect_source(
    source: bytes | Iterable[bytes],
    *,
    name: str,
    policy: FindingPolicy = DEFAULT_POLICY,
    routes: tuple[Route, ...] = DEFAULT_ROUTES,
) -> dict[str, Any]:
    """Read ``source`` to the end and summarise it.

    Returns:
        ``file``, ``interchanges`` (UNB count), ``messages`` (UNH type → count, an
        empty type as ``""``), ``classes`` (document class → count), ``segments``,
        ``consignments`` (CNI groups in any message), ``bl_units`` and
        ``dead_letter_units`` (from split classes), ``containers`` (``total``,
        ``valid``, ``invalid`` over EQD+CN), ``findings`` (list of dicts, at most
        :data:`~tidegate.edi.DEFAULT_MAX_FINDINGS_PER_CODE` per code plus one summary
        per code whose ``count`` is how many more there were), ``finding_groups``
        (identical findings counted, see :func:`group_findings`) and ``error``
        (``None``, or ``code`` and ``message``).
    """
    messages: Counter[str] = Counter()
    classes: Counter[str] = Counter()
    consignments = bl_units = dead_letter = 0
    containers = {"total": 0, "valid": 0, "invalid": 0}
    findings: list[Finding] = []
    cap = FindingCap()
    error: dict[str, str] | None = None
    intake = Intake(source, policy=policy, routes=routes)
    try:
        for result in intake:
            message = result.message
            messages[message.type] += 1
            classes[result.classification.document_class.name] += 1
            consignments += len(result.units) or sum(1 for s in message.body if s.tag == "CNI")
            bl_units += len(result.units)
            dead_letter += sum(1 for unit in result.units if unit.dead_letter)
            for container in result.extraction.containers:
                containers["total"] += 1
                containers["valid" if container.valid else "invalid"] += 1
            findings.extend(filter(cap.admit, result.all_findings()))
    except EdifactError as exc:
        error = {"code": getattr(exc, "code", "edifact"), "message": str(exc)}
    findings.extend(filter(cap.admit, intake.findings))
    findings.extend(cap.summaries())
    findings.sort(key=lambda f: -1 if f.segment_index is None else f.segment_index)
    listed = [f.to_dict() for f in findings]
    return {
        "file": name,
        "interchanges": len(intake.interchanges),
        "messages": dict(messages),
        "classes": dict(classes),
        "segments": intake.reader.segment_count,
        "consignments": consignments,
        "bl_units": bl_units,
        "dead_letter_units": dead_letter,
        "containers": containers,
        "findings": listed,
        "finding_groups": group_findings(listed),
        "error": error,
    }


def inspect_path(
    path: str | os.PathLike[str],
    *,
    policy: FindingPolicy = DEFAULT_POLICY,
    routes: tuple[Route, ...] = DEFAULT_ROUTES,
) -> dict[str, Any]:
    """:func:`inspect_source` over a file read in chunks; ``file`` is ``path`` as given."""
    return inspect_source(read_chunks(path), name=os.fspath(path), policy=policy, routes=routes)
