"""Port terms for the names the keyspace uses.

An operator on the quay knows "customs gateway" and "VERMAS", not ``customs`` or
``edi.customs.submit``. Unknown names are shown as they are, so a new downstream or
queue is never hidden for lack of a label.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "DOWNSTREAM_LABELS",
    "LEVEL_LABELS",
    "QUEUE_LABELS",
    "REASON_LABELS",
    "SIGNAL_LABELS",
    "downstream_label",
    "duration_label",
    "queue_label",
    "task_label",
]

#: Gate (downstream) names as operators say them.
DOWNSTREAM_LABELS: Mapping[str, str] = {
    "customs": "customs gateway",
    "tos": "terminal operating system",
    "docstore": "document store",
}

#: Queue names as operators say them.
QUEUE_LABELS: Mapping[str, str] = {
    "edi.customs": "customs filings",
    "edi.tos": "terminal reports",
    "bulk.dispatch": "manifests (IFCSUM) to split per B/L",
    "bulk.documents": "bulk documents (B/L PDFs, archive)",
}

#: A queue's level as the watermarks judge it.
LEVEL_LABELS: Mapping[str, str] = {
    "high": "over the high mark",
    "normal": "within its marks",
    "low": "under the low mark",
}

#: What the monitor asks of a queue's worker pool.
SIGNAL_LABELS: Mapping[str, str] = {
    "scale_out": "add workers",
    "hold": "keep workers",
    "scale_in": "release workers",
}

#: Why the monitor asked what it asked (:func:`tidegate.load.watermarks.advance`).
REASON_LABELS: Mapping[str, str] = {
    "above_hwm": "backlog over the high mark",
    "drained_to_lwm": "drained to the low mark",
    "within_watermarks": "backlog within its marks",
    "downstream_paused": "the downstream paused us",
    "downstream_concurrency": "every downstream connection busy",
    "downstream_rate": "the downstream's rate is the limit",
    "no_sample": "not sampled yet",
}

#: Task names by what they carry: the document class an operator recognises.
_TASK_LABELS: Mapping[str, str] = {
    "edi.customs.submit": "customs filing (VERMAS / CUSCAR)",
    "edi.tos.push": "terminal report (COARRI / CODECO)",
    "bulk.documents.store": "B/L document",
}


def downstream_label(name: str) -> str:
    """What the page calls gate ``name``."""
    return DOWNSTREAM_LABELS.get(name, name)


def queue_label(name: str) -> str:
    """What the page calls queue ``name``."""
    return QUEUE_LABELS.get(name, name)


def task_label(task: str) -> str:
    """The document class a dead letter's task stands for.

    A task of a B/L unit (``bl_number`` set) is labelled by the caller; here only the
    task name is known.
    """
    return _TASK_LABELS.get(task, task)


def duration_label(seconds: float) -> str:
    """``42 s``, ``7 min``, ``3 h 5 min``, ``2 d 4 h``: an age read at a glance on a wall."""
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172_800:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
