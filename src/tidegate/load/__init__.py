"""Inbound backpressure and the places a document can end up besides "delivered".

``parking`` holds messages that must wait long (durably, not in worker RAM); ``dlq``
holds units that cannot be delivered, with the reason, and ``replay`` gives them back;
``ledger`` remembers what each downstream already accepted.
"""

from __future__ import annotations

from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.load.ledger import DeliveryLedger
from tidegate.load.parking import ParkedMessage, ParkingLot

__all__ = ["DeadLetter", "DeadLetterQueue", "DeliveryLedger", "ParkedMessage", "ParkingLot"]
