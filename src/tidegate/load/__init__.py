"""Inbound backpressure and the places a document can end up besides "delivered".

``parking`` holds messages that must wait long (durably, not in worker RAM); ``dlq``
holds units that cannot be delivered, with the reason, and ``replay`` gives them back;
``ledger`` remembers what each downstream already accepted (or may have); ``payload``
refuses what is too large for the broker. ``depth`` (the protocol; the probes are the
integrations'), ``watermarks``,
``shedding``, ``quarantine`` and ``admission`` are the inbound controls: read queue
depth, decide scale signals with hysteresis, shed what may wait durably, admit at
publish time.
"""

from __future__ import annotations

from tidegate.load.admission import Admission, Admitted, Inbound, Outcome, Sender
from tidegate.load.depth import DepthProbe, QueueDepth
from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.load.ledger import DeliveryLedger, DeliveryState
from tidegate.load.parking import ParkedMessage, ParkingLot
from tidegate.load.payload import DEFAULT_MAX_PAYLOAD_BYTES, check_payload_size
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.shedding import (
    ARCHIVE_REPLAY,
    BULK_BL_PDF,
    DOCUMENT_CLASSES,
    ShedDecision,
    SheddingPolicy,
)
from tidegate.load.watermarks import (
    GateView,
    Level,
    LoadBoard,
    LoadState,
    ScalingPolicy,
    Signal,
    Watermarks,
    WatermarkStore,
    advance,
)

__all__ = [
    "ARCHIVE_REPLAY",
    "BULK_BL_PDF",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DOCUMENT_CLASSES",
    "Admission",
    "Admitted",
    "DeadLetter",
    "DeadLetterQueue",
    "DeliveryLedger",
    "DeliveryState",
    "DepthProbe",
    "GateView",
    "Inbound",
    "Level",
    "LoadBoard",
    "LoadState",
    "Outcome",
    "ParkedMessage",
    "ParkingLot",
    "Quarantine",
    "QuarantinedDocument",
    "QueueDepth",
    "ScalingPolicy",
    "Sender",
    "ShedDecision",
    "SheddingPolicy",
    "Signal",
    "WatermarkStore",
    "Watermarks",
    "advance",
    "check_payload_size",
]
