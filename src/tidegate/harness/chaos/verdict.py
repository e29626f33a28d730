"""The verdict of a chaos run: checks, and the worker-log readings they rest on.

A :class:`Check` is one verified claim (what was measured, against what bound). The
readings here are shared by several fault kinds: the workers' JSON events and lines,
the ``delivery_reconciled`` counts, and the split of keys accepted twice into those a
fault window explains and the rest.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from tidegate.harness.scenarios.vessel import Submission


@dataclass(frozen=True, slots=True)
class Check:
    """One verified claim: what was measured, against what bound, and whether it held."""

    name: str
    ok: bool
    observed: Any
    bound: Any = None
    note: str = ""


def _check(name: str, ok: bool, observed: Any, bound: Any = None, note: str = "") -> Check:
    return Check(name, bool(ok), observed, bound, note)


def unplanned_dead_letters(
    letters: Sequence[Mapping[str, Any]], submissions: Sequence[Submission]
) -> list[str]:
    """Dead-lettered keys the scenario did not plan to dead-letter, sorted.

    A scenario plans dead letters only for the malformed documents it mixes in (any
    :class:`Submission` whose ``kind`` is not ``"document"``). A healthy document in the
    DLQ is still "accounted for" by the sum, so without this a run that dead-letters
    good work would pass every other check.
    """
    planned = {item.key for item in submissions if item.kind != "document"}
    return sorted({str(letter["key"]) for letter in letters} - planned)


def _events(log_dir: Path | None, names: set[str]) -> list[dict[str, Any]]:
    """The worker log events named ``names`` (JSON lines), with ``t`` = Unix seconds."""
    if log_dir is None:
        return []
    found = []
    for path in sorted(log_dir.glob("worker-*.log")):
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.startswith("{"):
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") in names and "ts" in event:
                    event["t"] = datetime.fromisoformat(event["ts"]).timestamp()
                    found.append(event)
    return found


def _lines(log_dir: Path | None, needle: str) -> list[str]:
    """Worker log lines (JSON or not) containing ``needle``."""
    if log_dir is None:
        return []
    found: list[str] = []
    for path in sorted(log_dir.glob("worker-*.log")):
        with path.open(encoding="utf-8", errors="replace") as handle:
            found.extend(line for line in handle if needle in line)
    return found


def _reconciled(log_dir: Path | None) -> dict[str, int]:
    """Units that asked the downstream before sending (``delivery_reconciled``), by answer."""
    events = _events(log_dir, {"delivery_reconciled"})
    return dict(Counter(str(e.get("outcome")) for e in events))


def _reconciled_by_basis(log_dir: Path | None) -> dict[str, dict[str, int]]:
    """The same, split by why the ledger's word was not enough (``basis``)."""
    by_basis: dict[str, Counter[str]] = {}
    for event in _events(log_dir, {"delivery_reconciled"}):
        by_basis.setdefault(str(event.get("basis")), Counter())[str(event.get("outcome"))] += 1
    return {basis: dict(counts) for basis, counts in sorted(by_basis.items())}


def _explain_duplicates(
    chaos: dict[str, Any], windows: Sequence[tuple[str | None, float, float]]
) -> tuple[int, list[str]]:
    """Split duplicated keys into those a fault explains and the rest.

    A fault between the downstream's acceptance and the delivery-ledger mark (a
    SIGKILL, Redis going away) loses the fleet's knowledge of the acceptance: the
    message comes back and calls again; the idempotency key makes the second call
    harmless. Such a duplicate's *first* acceptance lies inside a fault window
    ``(pool or None for any, start, end)`` in Unix seconds.
    """
    pool_of = {"edi.customs": "customs", "edi.tos": "tos"}
    queue_of = chaos["_duplicate_queues"]
    accepts = chaos["_accepts"]
    explained, unexplained = 0, []
    for key in chaos["duplicate_keys"]:
        pool = pool_of.get(queue_of.get(key, ""), "")
        at = accepts[key][0]
        if any((p is None or p == pool) and lo <= at <= hi for p, lo, hi in windows):
            explained += 1
        else:
            unexplained.append(key)
    return explained, unexplained
