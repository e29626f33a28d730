"""The front door: senders post interchanges; tidegate acknowledges what is safe.

Folder by folder, one request goes :mod:`~tidegate.intake.reading` (the interchange
read by :mod:`tidegate.edi`) → :mod:`~tidegate.intake.duplicates` (claimed in the
duplicate window) → :mod:`~tidegate.intake.decision` (the pure answer: CONTRL,
status, units) → :mod:`~tidegate.intake.publisher` (the admission puts every unit on
the broker) → the record and the answer (:mod:`~tidegate.intake.pipeline`). The
HTTP layer (:mod:`~tidegate.intake.app`) only authenticates and bounds the upload; the
drop-folder watcher (:mod:`~tidegate.intake.watcher`, its rules in
:mod:`~tidegate.intake.folder`) feeds files from one folder per sender to the same
pipeline.

The Starlette application needs the ``intake`` extra (``pip install tidegate[intake]``);
everything else here runs without it.
"""

from __future__ import annotations

from typing import Any

from tidegate.intake.auth import ANONYMOUS, ApiKeys, Client, hash_key
from tidegate.intake.decision import Claim, Decision, Status, decide
from tidegate.intake.duplicates import (
    DEFAULT_LEASE_MS,
    DEFAULT_WINDOW_MS,
    ClaimResult,
    DuplicateStore,
    MemoryDuplicates,
)
from tidegate.intake.errors import (
    BodyTooLarge,
    IntakeError,
    NewlineTerminatedSegments,
    SenderNotPermitted,
    UnacceptableInterchange,
    Unauthenticated,
    UploadTimedOut,
)
from tidegate.intake.faults import FAULT_ENV, FaultPoint
from tidegate.intake.folder import SenderPauses, StableFiles, is_ignored
from tidegate.intake.pipeline import DEFAULT_RETRY_AFTER_S, IntakePipeline
from tidegate.intake.publisher import AdmissionPublisher, MemoryPublisher, Publisher
from tidegate.intake.reading import InterchangeHeader, Reading, ReadMessage, read_interchange
from tidegate.intake.redis_duplicates import RedisDuplicates
from tidegate.intake.watcher import FolderWatcher, Handled

__all__ = [
    "ANONYMOUS",
    "DEFAULT_LEASE_MS",
    "DEFAULT_RETRY_AFTER_S",
    "DEFAULT_WINDOW_MS",
    "FAULT_ENV",
    "AdmissionPublisher",
    "ApiKeys",
    "BodyTooLarge",
    "Claim",
    "ClaimResult",
    "Client",
    "Decision",
    "DuplicateStore",
    "FaultPoint",
    "FolderWatcher",
    "Handled",
    "IntakeError",
    "IntakePipeline",
    "InterchangeHeader",
    "Limits",
    "MemoryDuplicates",
    "MemoryPublisher",
    "NewlineTerminatedSegments",
    "Publisher",
    "ReadMessage",
    "Reading",
    "RedisDuplicates",
    "SenderNotPermitted",
    "SenderPauses",
    "StableFiles",
    "Status",
    "UnacceptableInterchange",
    "Unauthenticated",
    "UploadTimedOut",
    "create_app",
    "decide",
    "hash_key",
    "is_ignored",
    "read_interchange",
]


def __getattr__(name: str) -> Any:
    # The ASGI stack is an optional extra: import it only when the app is asked for.
    if name in {"Limits", "create_app"}:
        try:
            from tidegate.intake import app
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise ImportError(
                f"{name} needs the intake extra: run `pip install tidegate[intake]`"
            ) from exc
        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
