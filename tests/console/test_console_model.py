"""The live views' figures from raw replies — no Redis: the pure half of the console."""

from __future__ import annotations

import json

import pytest

from tidegate.console.labels import duration_label
from tidegate.console.model import gate_rows, letter_groups, quarantine_groups

NOW_S = 1_800_000_000
TIME = [NOW_S, 250_000]  # Redis TIME: seconds, microseconds
NOW_MS = NOW_S * 1000 + 250


def test_gate_row_from_the_snapshot_replies() -> None:
    """Live config overrides the defaults; a pause in the past shows as sending."""
    replies = [
        {b"rate": b"4", b"burst": b"8", b"concurrency": b"2"},
        {b"until_ms": str(NOW_MS + 30_000).encode(), b"reason": b"429"},
        2,
        None,
        None,
        {},
        {b"until_ms": str(NOW_MS - 1).encode(), b"reason": b"old"},
        0,
        None,
        None,
        TIME,
    ]
    paused, running = gate_rows(["customs", "rail"], replies)
    assert (paused.label, paused.rate, paused.burst, paused.concurrency) == (
        "customs gateway",
        4.0,
        8,
        2,
    )
    assert paused.paused_for_s == pytest.approx(30.0)
    assert (paused.pause_reason, paused.leases_held, paused.tokens) == ("429", 2, 8)
    assert running.label == "rail"  # no label known: the name itself
    assert not running.paused
    assert running.pause_reason is None


def test_tokens_follow_the_bucket() -> None:
    """A TAT one interval ahead of now costs one token of the burst."""
    replies = [{b"rate": b"2", b"burst": b"5"}, {}, 0, str(NOW_MS + 500).encode(), b"7", TIME]
    (row,) = gate_rows(["customs"], replies)
    assert row.tokens == 4


def test_letters_grouped_with_replay_marks_and_oldest_age() -> None:
    """Counted per reason and class; a lapsed replay mark does not count as in replay."""
    records = [
        json.dumps(
            {"key": k, "task": "edi.customs.submit", "reason": "VGM missing", "first_failed_at": t}
        ).encode()
        for k, t in (("a", NOW_S - 100), ("b", NOW_S - 3600), ("c", NOW_S - 5))
    ]
    records.append(
        json.dumps(
            {
                "key": "d",
                "task": "x.y",
                "reason": "timeout",
                "bl_number": "B1",
                "first_failed_at": 0,
            }
        ).encode()
    )
    replaying = [(b"a", NOW_MS + 10_000.0), (b"b", NOW_MS - 10.0)]
    vgm, timeout = letter_groups(records, replaying, TIME)
    assert (vgm.reason, vgm.count, vgm.in_replay) == ("VGM missing", 3, 1)
    assert vgm.oldest_age_s == pytest.approx(3600.25)
    assert vgm.document_class == "customs filing (VERMAS / CUSCAR)"
    assert (timeout.document_class, timeout.count) == ("x.y, per B/L", 1)


def test_quarantine_grouped_by_class() -> None:
    records = {
        b"k1": json.dumps({"document_class": "IFTSTA", "reason": "sustained_overload"}).encode(),
        b"k2": json.dumps({"document_class": "IFTSTA", "reason": "sustained_overload"}).encode(),
    }
    since = {b"k1": str(NOW_MS - 60_000).encode(), b"k2": str(NOW_MS - 1000).encode()}
    (group,) = quarantine_groups(records, since, TIME)
    assert (group.document_class, group.count, group.oldest_age_s) == ("IFTSTA", 2, 60.0)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0 s"), (119, "119 s"), (120, "2 min"), (7260, "2 h 1 min"), (200_000, "2 d 7 h")],
)
def test_durations_read_at_a_glance(seconds: float, shown: str) -> None:
    assert duration_label(seconds) == shown
