"""The report behind ``tidegate edi inspect``: counts and findings for one file.

Kept apart from the CLI so that the report is a plain dict that tests, the CLI and any
future HTTP endpoint build the same way. A file that cannot be read, or is not EDIFACT,
still gets a report: its ``error`` says why, and the counts cover what was read before.
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

__all__ = ["inspect_path", "inspect_source"]


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
        per code whose ``count`` is how many more there were) and ``error``
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
        "findings": [f.to_dict() for f in findings],
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
