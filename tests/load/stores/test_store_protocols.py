"""Each store's protocol is the one its callers use, and both backends have it."""

from __future__ import annotations

import typing

from tidegate.delivery import driver
from tidegate.load.protocols import DeadLetterStore, ParkingStore, QuarantineStore
from tidegate.load.replay import replay_dead_letters


def test_both_backends_have_each_stores_protocol(
    parking: ParkingStore, quarantine: QuarantineStore, dlq: DeadLetterStore
) -> None:
    """Runtime-checked (method names); mypy checks the signatures in
    ``tidegate.load.protocols``."""
    assert isinstance(parking, ParkingStore)
    assert isinstance(quarantine, QuarantineStore)
    assert isinstance(dlq, DeadLetterStore)
    assert not isinstance(parking, DeadLetterStore)


def test_the_driver_and_the_replay_use_the_dlq_protocol_not_a_copy() -> None:
    """One protocol: the driver's ``Stores.dlq`` and the replay take the load one."""
    assert driver.Stores.__annotations__["dlq"] == "DeadLetterStore"
    assert driver.DeadLetterStore is DeadLetterStore
    assert typing.get_type_hints(replay_dead_letters)["dlq"] is DeadLetterStore
