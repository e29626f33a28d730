"""The drop-folder watcher on real files, a real Redis broker and a real admission."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from pydifact.segmentcollection import Interchange as PydifactInterchange

from tidegate.edi import Route
from tidegate.intake import (
    AdmissionPublisher,
    FaultPoint,
    FolderWatcher,
    IntakePipeline,
    RedisDuplicates,
)
from tidegate.load.admission import Admission

pytestmark = [
    pytest.mark.redis,
    pytest.mark.filterwarnings("ignore::pydifact.exceptions.MissingImplementationWarning"),
]


class Crash(BaseException):
    """Stands for the process dying at a fault point (nothing after it runs)."""


def _crash() -> None:
    raise Crash


@pytest.fixture
def make_watcher(
    tmp_path: Path,
    redis_client: redis.Redis,
    prefix: str,
    admission: Admission,
    routes: tuple[Route, ...],
) -> Iterator[Callable[..., FolderWatcher]]:
    pipelines: list[IntakePipeline] = []

    def make(fault: str | None = None) -> FolderWatcher:
        pipeline = IntakePipeline(
            duplicates=RedisDuplicates(redis_client, prefix=prefix),
            publisher=AdmissionPublisher(admission),
            routes=routes,
            fault=FaultPoint(fault, action=_crash),
        )
        pipelines.append(pipeline)
        return FolderWatcher(tmp_path, pipeline, poll_s=0.01)

    yield make
    for pipeline in pipelines:
        pipeline.close()


def _drop(root: Path, sender: str, name: str, body: bytes) -> Path:
    folder = root / sender
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(body)
    return path


def _two_looks(watcher: FolderWatcher):
    """The first look only records the files; the second takes those that did not change."""
    assert watcher.scan_once() == []
    return watcher.scan_once()


def test_an_accepted_file_moves_to_done_with_its_contrl_once_its_units_are_published(
    tmp_path: Path,
    make_watcher,
    build,
    redis_client: redis.Redis,
    queue_of: Callable[[str], str],
) -> None:
    """Same pipeline as HTTP: the units on the broker, the CONTRL (UCI 8) beside the file."""
    _drop(tmp_path, "ACME", "m1.edi", build.interchange(build.vermas(), build.ifcsum()))
    (handled,) = _two_looks(make_watcher())
    assert handled.verdict.status == "accepted"
    done = tmp_path / "ACME" / "done"
    assert handled.moved_to == done / "m1.edi"
    assert not (tmp_path / "ACME" / "m1.edi").exists()
    assert redis_client.llen(queue_of("edi.customs")) == 1
    assert redis_client.llen(queue_of("bulk.dispatch")) == 1
    contrl = (done / "m1.edi.contrl").read_text("latin-1")
    segments = list(PydifactInterchange.from_str(contrl).segments)
    assert [s.tag for s in segments] == ["UNH", "UCI", "UCM", "UCM", "UNT"]
    assert segments[1].elements[3] == "8"
    answer = json.loads((done / "m1.edi.json").read_text())
    assert (answer["status"], answer["units"]) == ("accepted", 2)


def test_a_file_being_written_is_not_read_until_it_stops_changing(
    tmp_path: Path, make_watcher, build, redis_client: redis.Redis, queue_of
) -> None:
    """Written in place in two halves: neither half is read; the whole is, once stable.
    A .part file is never read; renamed to its final name, it is."""
    body = build.interchange(build.vermas())
    watcher = make_watcher()
    path = _drop(tmp_path, "ACME", "slow.edi", body[:20])
    part = _drop(
        tmp_path, "ACME", "fast.edi.part", build.interchange(build.vermas("2"), reference="R2")
    )
    assert watcher.scan_once() == []
    with path.open("ab") as handle:
        handle.write(body[20:])
    assert watcher.scan_once() == []  # it grew since the last look
    (handled,) = watcher.scan_once()
    assert (handled.name, handled.verdict.status) == ("slow.edi", "accepted")
    assert watcher.scan_once() == []
    assert part.exists()
    part.rename(part.with_name("fast.edi"))
    assert watcher.scan_once() == []
    (renamed,) = watcher.scan_once()
    assert (renamed.name, renamed.verdict.status) == ("fast.edi", "accepted")
    assert redis_client.llen(queue_of("edi.customs")) == 2


def test_a_resent_file_is_a_duplicate_in_rejected_with_code_26_and_published_once(
    tmp_path: Path, make_watcher, build, redis_client: redis.Redis, queue_of
) -> None:
    """Same sender, same interchange reference, another file name (or the same one)."""
    body = build.interchange(build.vermas())
    watcher = make_watcher()
    _drop(tmp_path, "ACME", "a.edi", body)
    _two_looks(watcher)
    _drop(tmp_path, "ACME", "a.edi", body)
    (handled,) = _two_looks(watcher)
    assert handled.verdict.status == "duplicate"
    rejected = tmp_path / "ACME" / "rejected"
    assert handled.moved_to == rejected / "a.edi"
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+26'" in (rejected / "a.edi.contrl").read_text()
    assert redis_client.llen(queue_of("edi.customs")) == 1
    _drop(tmp_path, "ACME", "a.edi", body)
    (again,) = _two_looks(watcher)
    assert again.moved_to == rejected / "a.edi.1"  # the earlier file and CONTRL are kept
    assert (rejected / "a.edi.1.contrl").exists()


def test_the_folder_is_the_senders_identity(
    tmp_path: Path, make_watcher, build, redis_client: redis.Redis, queue_of
) -> None:
    """A file in OTHER's folder naming ACME in its UNB is refused, nothing published."""
    _drop(tmp_path, "OTHER", "x.edi", build.interchange(build.vermas()))
    _drop(tmp_path, "OTHER", "junk.txt", b"not an interchange at all")
    handled = {h.name: h for h in _two_looks(make_watcher())}
    assert handled["x.edi"].verdict.reason == "sender_not_permitted"
    assert handled["x.edi"].moved_to == tmp_path / "OTHER" / "rejected" / "x.edi"
    answer = json.loads((tmp_path / "OTHER" / "rejected" / "x.edi.json").read_text())
    assert answer["error"]["code"] == "sender_not_permitted"
    assert not (tmp_path / "OTHER" / "rejected" / "x.edi.contrl").exists()
    assert handled["junk.txt"].verdict.destination.value == "rejected"
    assert redis_client.llen(queue_of("edi.customs")) == 0


def test_a_file_above_the_limit_is_rejected_unread(
    tmp_path: Path, make_watcher, build, redis_client: redis.Redis, queue_of
) -> None:
    """The limit is checked on the file's size before a byte is read."""
    watcher = make_watcher()
    watcher.max_file_bytes = 100
    _drop(tmp_path, "ACME", "big.edi", build.interchange(build.vermas()))
    (handled,) = _two_looks(watcher)
    assert handled.verdict.reason == "body_too_large"
    assert handled.moved_to == tmp_path / "ACME" / "rejected" / "big.edi"
    assert redis_client.llen(queue_of("edi.customs")) == 0


def test_above_the_hwm_the_senders_folder_pauses_until_the_queue_is_below_the_lwm(
    tmp_path: Path, make_watcher, build, redis_client: redis.Redis, queue_of
) -> None:
    """Customs holds 6 > HWM 5: ACME's file stays and ACME's folder is no longer read
    (its second file neither); another sender's manifest (another queue) still flows.
    At depth 3 (below the HWM, above the LWM 1) ACME is still paused; at 0 it resumes."""
    customs = queue_of("edi.customs")
    redis_client.lpush(customs, *[b"backlog"] * 6)
    watcher = make_watcher()
    _drop(tmp_path, "ACME", "a.edi", build.interchange(build.vermas()))
    _drop(tmp_path, "ACME", "b.edi", build.interchange(build.vermas("2"), reference="R2"))
    _drop(tmp_path, "BETA", "m.edi", build.interchange(build.ifcsum(), sender="BETA"))
    handled = {h.name: h for h in _two_looks(watcher)}
    assert set(handled) == {"a.edi", "m.edi"}
    assert handled["a.edi"].verdict.status == "retry"
    assert handled["a.edi"].moved_to is None
    assert handled["m.edi"].verdict.status == "accepted"
    assert watcher.pauses.is_paused("ACME")
    assert redis_client.llen(customs) == 6

    redis_client.ltrim(customs, 0, 2)
    assert watcher.scan_once() == []
    assert watcher.scan_once() == []
    assert watcher.pauses.is_paused("ACME")

    redis_client.delete(customs)
    taken = watcher.scan_once()
    assert sorted(h.name for h in taken) == ["a.edi", "b.edi"]
    assert {h.verdict.status for h in taken} == {"accepted"}
    assert redis_client.llen(customs) == 2


def test_a_crash_between_publish_and_move_leaves_the_file_and_its_reread_is_a_duplicate(
    tmp_path: Path, make_watcher, build, redis_client: redis.Redis, queue_of
) -> None:
    """The process dies after the pipeline recorded the interchange, before the CONTRL
    and the move: the file is still there; the next watcher (after the restart) reads
    it, finds the interchange accepted, and moves it to rejected/ with code 26."""
    path = _drop(tmp_path, "ACME", "a.edi", build.interchange(build.vermas(), build.ifcsum()))
    crashing = make_watcher("before_ack")
    crashing.scan_once()
    with pytest.raises(Crash):
        crashing.scan_once()
    assert path.exists()
    assert not (tmp_path / "ACME" / "done").exists()
    assert redis_client.llen(queue_of("edi.customs")) == 1

    (handled,) = _two_looks(make_watcher())
    assert handled.verdict.status == "duplicate"
    assert handled.moved_to == tmp_path / "ACME" / "rejected" / "a.edi"
    assert redis_client.llen(queue_of("edi.customs")) == 1
    assert redis_client.llen(queue_of("bulk.dispatch")) == 1
