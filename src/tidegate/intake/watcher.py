"""The drop-folder watcher: one directory per sender, each file through the intake pipeline.

This is the filesystem loop only; what it decides — which files are complete, where a
file goes, when a sender's folder pauses — is in :mod:`~tidegate.intake.folder` (the
convention senders follow is written there). A file goes through the same
:class:`~tidegate.intake.pipeline.IntakePipeline` as an HTTP body, so it is
acknowledged (its CONTRL written) only after every unit is on the broker.

**Authentication is the directory.** ``root/<sender id>/`` is owned — on the SFTP
server, by file-system permissions — by the one account that may write there, and the
folder's name is the only UNB sender id its files may carry; a file naming another
sender is moved to ``rejected/`` unread further.

**Crash safety.** The order per file is: read, decide and publish (the pipeline records
the interchange as accepted), write the CONTRL and JSON answer into the target folder,
then move the file there (``os.replace``, atomic within one file system). A crash before
the move leaves the file in place; read again, it is a duplicate of the recorded
interchange and goes to ``rejected/`` with code 26 — nothing is published twice. (The
first CONTRL may be lost in that crash; the ``.json`` beside the duplicate says
``duplicate`` and the interchange's units are on the broker.)
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tidegate.edi.errors import LocatedEdifactError
from tidegate.errors import ConfigurationError, EdifactError, PayloadTooLarge, TidegateError
from tidegate.events import IntakeFolderPaused, IntakeFolderResumed, emit
from tidegate.intake.auth import Client
from tidegate.intake.errors import IntakeError, UnacceptableInterchange
from tidegate.intake.folder import (
    COMPANION_SUFFIXES,
    Destination,
    FileLook,
    FileVerdict,
    SenderPauses,
    StableFiles,
    refused,
    route,
)
from tidegate.intake.pipeline import IntakePipeline
from tidegate.logging import get_logger

__all__ = ["DEFAULT_MAX_FILE_BYTES", "DEFAULT_POLL_S", "FolderWatcher", "Handled"]

log = get_logger("tidegate.intake")

#: Seconds between two looks at the folders (a written-in-place file waits at least one).
DEFAULT_POLL_S = 1.0
#: Largest file taken; larger ones are moved to ``rejected/`` without being read.
DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Handled:
    """One file's fate, for callers and tests.

    Attributes:
        sender: the folder's sender id.
        name: the file's name.
        verdict: what was decided.
        moved_to: the file's new path, or ``None`` when it stays (retry).
    """

    sender: str
    name: str
    verdict: FileVerdict
    moved_to: Path | None


def _codec(verdict: FileVerdict) -> str:
    interchange = verdict.answer.get("interchange")
    syntax = interchange.get("syntax", "") if isinstance(interchange, dict) else ""
    return "utf-8" if syntax.upper().startswith(("UNOW", "UNOY")) else "latin-1"


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


class FolderWatcher:
    """Reads the sender folders under ``root`` and feeds each complete file to the pipeline.

    Args:
        root: the folder holding one sub-folder per sender id.
        pipeline: the intake pipeline (the HTTP service's, when both run).
        poll_s: seconds between looks (:meth:`run`).
        max_file_bytes: larger files are rejected unread.

    Raises:
        ConfigurationError: ``root`` is not a directory, or a bad ``poll_s``/limit.
    """

    def __init__(
        self,
        root: str | Path,
        pipeline: IntakePipeline,
        *,
        poll_s: float = DEFAULT_POLL_S,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigurationError(f"--watch {str(root)!r} is not a directory")
        if not poll_s > 0:
            raise ConfigurationError(f"poll_s must be > 0, got {poll_s!r}")
        if isinstance(max_file_bytes, bool) or max_file_bytes < 1:
            raise ConfigurationError(f"max_file_bytes must be >= 1, got {max_file_bytes!r}")
        self.pipeline = pipeline
        self.poll_s = poll_s
        self.max_file_bytes = max_file_bytes
        self.stable = StableFiles()
        self.pauses = SenderPauses()

    # -- listing -------------------------------------------------------------------------

    def _senders(self) -> Iterator[Path]:
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                yield Path(entry.path)

    @staticmethod
    def _looks(folder: Path) -> list[FileLook]:
        looks = []
        for entry in os.scandir(folder):
            if not entry.is_file(follow_symlinks=False):
                continue  # done/, rejected/ and anything else that is not a plain file
            try:
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # renamed away between the listing and the stat
            looks.append(FileLook(entry.name, stat.st_size, stat.st_mtime_ns))
        return looks

    # -- one pass ------------------------------------------------------------------------

    def scan_once(self) -> list[Handled]:
        """One look at every sender folder; handles the files that are complete."""
        resumed = self.pauses.resume_drained(self.pipeline.publisher.drained)
        for sender in resumed:
            emit(IntakeFolderResumed(sender))
        handled = []
        for folder in self._senders():
            sender = folder.name
            looks = self._looks(folder)
            ready = self.stable.observe(sender, looks)
            sizes = {look.name: look.size for look in looks}
            for name in ready:
                if self.pauses.is_paused(sender):
                    break
                self.stable.forget(sender, name)
                handled.append(self._handle(folder, name, sizes[name]))
        return handled

    def _decide(self, folder: Path, name: str, size: int) -> FileVerdict:
        if size > self.max_file_bytes:
            return refused(
                "body_too_large",
                f"the file is {size} bytes, above the intake limit of "
                f"{self.max_file_bytes} bytes; split the interchange",
            )
        body = (folder / name).read_bytes()
        if len(body) > self.max_file_bytes:
            return refused("body_too_large", "the file grew above the intake limit")
        client = Client(f"folder:{folder.name}", frozenset({folder.name}))
        try:
            decision = self.pipeline.submit(body, client)
        except IntakeError as exc:
            code = exc.reason_code if isinstance(exc, UnacceptableInterchange) else exc.code
            return refused(code, str(exc))
        except PayloadTooLarge as exc:
            return refused("unit_too_large", str(exc))
        except EdifactError as exc:
            code = exc.code if isinstance(exc, LocatedEdifactError) else "edifact"
            return refused(code, str(exc))
        return route(decision)

    def _target(self, folder: Path, destination: Destination, name: str) -> Path:
        target_dir = folder / destination.value
        target_dir.mkdir(exist_ok=True)
        target = target_dir / name
        serial = 1
        # A sender may reuse a file name: never overwrite an earlier file or its CONTRL.
        while target.exists() or any(
            target.with_name(target.name + s).exists() for s in COMPANION_SUFFIXES
        ):
            target = target_dir / f"{name}.{serial}"
            serial += 1
        return target

    def _handle(self, folder: Path, name: str, size: int) -> Handled:
        sender = folder.name
        verdict = self._decide(folder, name, size)
        self.pipeline.fault.reached("before_ack")
        moved_to = None
        if verdict.destination is Destination.KEEP:
            if verdict.pause_queues:
                self.pauses.pause(sender, verdict.pause_queues)
                emit(IntakeFolderPaused(sender, sorted(verdict.pause_queues)))
        else:
            target = self._target(folder, verdict.destination, name)
            if verdict.contrl is not None:
                _write_atomically(
                    target.with_name(target.name + ".contrl"),
                    verdict.contrl.encode(_codec(verdict), errors="replace"),
                )
            _write_atomically(target.with_name(target.name + ".json"), _json(verdict))
            os.replace(folder / name, target)
            moved_to = target
        log.info(
            "intake_file_handled",
            sender=sender,
            status=verdict.status,
            reason=verdict.reason,
            destination=verdict.destination.value,
            bytes=size,
        )
        return Handled(sender, name, verdict, moved_to)

    # -- the loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Look every ``poll_s`` until ``stop`` is set; a failed pass is logged, not fatal."""
        log.info("intake_folder_watching", root=str(self.root), poll_s=self.poll_s)
        while not stop.is_set():
            try:
                self.scan_once()
            except (OSError, TidegateError) as exc:
                # The files stay where they are and are looked at again next time.
                log.error("intake_folder_error", error=str(exc))
            stop.wait(self.poll_s)


def _json(verdict: FileVerdict) -> bytes:
    return json.dumps(dict(verdict.answer), sort_keys=True, indent=2).encode("utf-8")
