"""The drop folder's decisions, without a filesystem: which files to take, where each goes.

The watcher (:mod:`~tidegate.intake.watcher`) lists directories, reads files and moves
them; everything it decides is here, as pure values and small state machines driven by
what it saw, so each rule is a plain unit test.

**The convention senders follow** (``root/<sender id>/`` is one sender's folder):

- write the file under a name that starts with ``.`` or ends with ``.tmp``, ``.part``,
  ``.partial``, ``.filepart`` or ``~`` and rename it when complete (SFTP clients such as
  WinSCP do this by default) — such names are never read;
- or write it in place: a file is only taken once its size and modification time were
  the same on two consecutive looks (one poll interval apart), so a file still being
  written is never read half-way.

**Where a file goes.** Accepted and partly rejected interchanges go to ``done/``;
rejected ones, duplicates (CONTRL code 26) and refused files (not EDIFACT, too large,
a UNB sender id other than the folder's) to ``rejected/``. The CONTRL, when there is
one, is written beside the file as ``<name>.contrl``, and the JSON answer (what the HTTP
intake would have answered) as ``<name>.json``. A file told to retry — its queue is
above the HWM, or Redis or the broker failed — stays where it is and is read again
later; nothing of it was acknowledged.

**Backpressure.** A file refused because a queue is above its HWM pauses its sender's
folder: no file of that sender is taken until every such queue is back at or below its
LWM (:class:`SenderPauses`), so a saturated fleet is not polled file by file.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.intake.decision import Decision, Status

__all__ = [
    "COMPANION_SUFFIXES",
    "DONE",
    "IGNORED_SUFFIXES",
    "REJECTED",
    "Destination",
    "FileLook",
    "FileVerdict",
    "SenderPauses",
    "StableFiles",
    "is_ignored",
    "refused",
    "route",
]

#: The sub-folders of a sender's folder; never read as input.
DONE = "done"
REJECTED = "rejected"
#: Name endings of files still being written (renamed when complete).
IGNORED_SUFFIXES = (".tmp", ".part", ".partial", ".filepart", "~")
#: Name endings of the files the watcher writes beside a moved file.
COMPANION_SUFFIXES = (".contrl", ".json")


def is_ignored(name: str) -> bool:
    """Whether ``name`` is a file in the making (dot name or temporary ending)."""
    return name.startswith(".") or name.lower().endswith(IGNORED_SUFFIXES)


@dataclass(frozen=True, slots=True)
class FileLook:
    """One file as seen by one directory listing."""

    name: str
    size: int
    mtime_ns: int


class StableFiles:
    """Files whose size and modification time did not change between two looks.

    The state is the previous look per sender folder; :meth:`observe` replaces it and
    returns the names that may be read now. A file that changed since the last look
    (or was not there) waits for the next one; a file taken is forgotten once it is
    gone from the listing.
    """

    def __init__(self) -> None:
        self._previous: dict[str, dict[str, tuple[int, int]]] = {}

    def observe(self, sender: str, looks: Iterable[FileLook]) -> tuple[str, ...]:
        """Record this look at ``sender``'s folder; the names stable since the last."""
        before = self._previous.get(sender, {})
        now = {look.name: (look.size, look.mtime_ns) for look in looks if not is_ignored(look.name)}
        self._previous[sender] = now
        return tuple(sorted(name for name, stat in now.items() if before.get(name) == stat))

    def forget(self, sender: str, name: str) -> None:
        """Drop a file that was read (it must be stable again to be read again)."""
        self._previous.get(sender, {}).pop(name, None)


class Destination(enum.Enum):
    """Where a file goes after its decision."""

    DONE = DONE
    REJECTED = REJECTED
    #: Stays in the sender's folder, to be read again (nothing was acknowledged).
    KEEP = "keep"


@dataclass(frozen=True, slots=True)
class FileVerdict:
    """What to do with one file.

    Attributes:
        destination: ``done/``, ``rejected/`` or stay.
        status: the answer's status (``accepted`` … ``retry``).
        reason: why, in one snake_case word.
        contrl: the CONTRL text to write beside the file, if any.
        answer: the JSON answer to write beside it.
        pause_queues: queues above their HWM: pause the sender until they drain.
    """

    destination: Destination
    status: str
    reason: str
    contrl: str | None
    answer: Mapping[str, Any]
    pause_queues: frozenset[str] = frozenset()


_DESTINATIONS = {
    Status.ACCEPTED: Destination.DONE,
    Status.PARTLY_REJECTED: Destination.DONE,
    Status.REJECTED: Destination.REJECTED,
    Status.DUPLICATE: Destination.REJECTED,
    Status.RETRY: Destination.KEEP,
}


def route(decision: Decision) -> FileVerdict:
    """The verdict on a file the pipeline decided on."""
    pause = frozenset(decision.saturated) if decision.reason == "saturated" else frozenset()
    return FileVerdict(
        _DESTINATIONS[decision.status],
        decision.status.value,
        decision.reason,
        decision.contrl,
        decision.body,
        pause,
    )


def refused(code: str, message: str) -> FileVerdict:
    """The verdict on a file refused before any decision (same JSON as the HTTP 4xx)."""
    answer = {
        "status": "rejected",
        "error": {"code": code, "message": message},
        "contrl": None,
        "interchange": None,
        "units": 0,
    }
    return FileVerdict(Destination.REJECTED, "rejected", code, None, answer)


class SenderPauses:
    """Senders whose folders are not read until the queues that refused them drain.

    A sender is paused with the queues found above their HWM, and resumed when every
    one of them is at or below its LWM (the watermarks' own hysteresis band: a folder
    does not flip between taken and paused while a queue hovers at its HWM).
    """

    def __init__(self) -> None:
        self._paused: dict[str, frozenset[str]] = {}

    def pause(self, sender: str, queues: Iterable[str]) -> None:
        """Pause ``sender`` until ``queues`` (added to any it waits for) drain."""
        self._paused[sender] = self._paused.get(sender, frozenset()) | frozenset(queues)

    def is_paused(self, sender: str) -> bool:
        """Whether ``sender``'s folder is skipped."""
        return sender in self._paused

    def waiting_on(self) -> frozenset[str]:
        """Every queue some paused sender waits for."""
        return frozenset(q for queues in self._paused.values() for q in queues)

    def resume_drained(self, drained: Callable[[frozenset[str]], frozenset[str]]) -> list[str]:
        """Resume the senders whose queues all drained; returns them.

        Args:
            drained: given the queues waited on, the ones at or below their LWM.
        """
        if not self._paused:
            return []
        down = drained(self.waiting_on())
        resumed = sorted(s for s, queues in self._paused.items() if queues <= down)
        for sender in resumed:
            del self._paused[sender]
        return resumed
