"""The drop folder's rules, without a filesystem: complete files, destinations, pauses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tidegate.intake import Claim, SenderPauses, StableFiles, decide, is_ignored, read_interchange
from tidegate.intake.decision import retry
from tidegate.intake.folder import Destination, FileLook, refused, route

NOW = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "ignored"),
    [
        (".manifest.edi", True),
        ("manifest.edi.tmp", True),
        ("manifest.edi.PART", True),
        ("manifest.edi.partial", True),
        ("manifest.edi.filepart", True),
        ("manifest.edi~", True),
        ("manifest.edi", False),
        ("manifest", False),
        ("tmp.edi", False),
    ],
)
def test_files_in_the_making_are_never_read(name: str, ignored: bool) -> None:
    """Dot names and temporary endings are how SFTP clients write before renaming."""
    assert is_ignored(name) is ignored


def test_a_file_is_ready_only_once_it_looked_the_same_twice() -> None:
    """First sight: not yet. Grown since: not yet. Unchanged: ready. Taken, then seen
    again (it stayed for a retry): it must be stable over two new looks."""
    stable = StableFiles()
    assert stable.observe("ACME", [FileLook("a.edi", 10, 1)]) == ()
    assert stable.observe("ACME", [FileLook("a.edi", 20, 2)]) == ()
    assert stable.observe("ACME", [FileLook("a.edi", 20, 2)]) == ("a.edi",)
    stable.forget("ACME", "a.edi")
    assert stable.observe("ACME", [FileLook("a.edi", 20, 2)]) == ()
    assert stable.observe("ACME", [FileLook("a.edi", 20, 2)]) == ("a.edi",)


def test_a_touched_file_waits_and_folders_are_tracked_apart() -> None:
    """Same size but a new mtime is a change; one sender's look says nothing of another's."""
    stable = StableFiles()
    stable.observe("ACME", [FileLook("a.edi", 10, 1)])
    assert stable.observe("ACME", [FileLook("a.edi", 10, 5)]) == ()
    assert stable.observe("OTHER", [FileLook("a.edi", 10, 5)]) == ()
    assert stable.observe("ACME", [FileLook("a.edi", 10, 5), FileLook(".b.tmp", 1, 1)]) == (
        "a.edi",
    )


def test_a_temporary_file_is_never_ready_however_long_it_stays() -> None:
    """Stability alone does not make a dot or .part file complete."""
    stable = StableFiles()
    for _ in range(3):
        assert stable.observe("ACME", [FileLook("x.edi.part", 5, 1)]) == ()


def _reading(build, *messages: list[str]):
    return read_interchange(build.interchange(*messages))


def test_each_status_has_its_folder(build) -> None:
    """Accepted → done/; rejected and duplicate → rejected/; retry stays (and pauses
    the sender only when a queue is saturated)."""
    reading = _reading(build, build.vermas())
    common = {"contrl_reference": "C1", "now": NOW, "retry_after_s": 5}
    accepted = route(decide(reading, claim=Claim.NEW, saturated=frozenset(), **common))
    assert (accepted.destination, accepted.status) == (Destination.DONE, "accepted")
    assert accepted.contrl is not None
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+8'" in accepted.contrl

    duplicate = route(decide(reading, claim=Claim.DUPLICATE, saturated=frozenset(), **common))
    assert duplicate.destination is Destination.REJECTED
    assert duplicate.contrl is not None
    assert "+4+26'" in duplicate.contrl

    bad = _reading(build, build.vermas(container="MSCU1234560"))
    rejected = route(decide(bad, claim=Claim.NEW, saturated=frozenset(), **common))
    assert (rejected.destination, rejected.status) == (Destination.REJECTED, "rejected")

    queue = reading.units[0].queue
    full = route(decide(reading, claim=Claim.NEW, saturated=frozenset({queue}), **common))
    assert (full.destination, full.pause_queues) == (Destination.KEEP, frozenset({queue}))

    lost = route(retry(reading, "backend_unavailable", retry_after_s=5))
    assert (lost.destination, lost.pause_queues) == (Destination.KEEP, frozenset())


def test_a_refused_file_goes_to_rejected_with_the_http_shape_of_answer() -> None:
    """No CONTRL (nothing was read as an interchange), the code in the JSON."""
    verdict = refused("sender_not_permitted", "not yours")
    assert verdict.destination is Destination.REJECTED
    assert verdict.contrl is None
    assert verdict.answer["error"] == {"code": "sender_not_permitted", "message": "not yours"}


def test_a_paused_sender_resumes_only_when_every_queue_it_waits_on_drained() -> None:
    """Two queues refused ACME; one draining is not enough. OTHER waits on one."""
    pauses = SenderPauses()
    pauses.pause("ACME", ["q1"])
    pauses.pause("ACME", ["q2"])
    pauses.pause("OTHER", ["q2"])
    asked: list[frozenset[str]] = []

    def drained(down: frozenset[str]):
        def check(queues: frozenset[str]) -> frozenset[str]:
            asked.append(queues)
            return queues & down

        return check

    assert pauses.resume_drained(drained(frozenset({"q1"}))) == []
    assert pauses.is_paused("ACME")
    assert pauses.is_paused("OTHER")
    assert pauses.resume_drained(drained(frozenset({"q2"}))) == ["OTHER"]
    assert pauses.resume_drained(drained(frozenset({"q1", "q2"}))) == ["ACME"]
    assert not pauses.is_paused("ACME")
    assert asked[0] == frozenset({"q1", "q2"})
    assert pauses.resume_drained(drained(frozenset())) == []
    assert len(asked) == 3  # nobody paused: the queues are not even read
