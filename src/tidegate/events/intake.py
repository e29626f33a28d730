"""Decisions of the folder intake: stop reading a sender while its queues are full."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tidegate.events._base import Event

__all__ = ["IntakeFolderPaused", "IntakeFolderResumed"]


@dataclass(frozen=True, slots=True)
class IntakeFolderPaused(Event):
    """A sender's folder is no longer read: ``queues`` are saturated."""

    EVENT: ClassVar[str] = "intake_folder_paused"
    COMPONENT: ClassVar[str] = "tidegate.intake"

    sender: str
    queues: Sequence[str]


@dataclass(frozen=True, slots=True)
class IntakeFolderResumed(Event):
    """A paused sender's queues drained: its folder is read again."""

    EVENT: ClassVar[str] = "intake_folder_resumed"
    COMPONENT: ClassVar[str] = "tidegate.intake"

    sender: str
