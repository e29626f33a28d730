"""The bulk path with real workers: fan-out per B/L, DLQ, idempotent aggregate, replay."""

from __future__ import annotations

import os
import signal
from typing import Any

import psutil
import pytest

from tidegate.bulk import BatchStore
from tidegate.edi.intake import Intake
from tidegate.edi.synthetic import synthetic_ifcsum
from tidegate.integrations.celery.gated import REPLAY_HEADER
from tidegate.load import DeadLetter
from tidegate.load.replay import replay_dead_letters

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]

BLS = 2000


def _manifest(seed: int, count: int = BLS) -> tuple[str, list[str]]:
    """A project-generated IFCSUM: every consignment has its own RFF+BM."""
    text = synthetic_ifcsum(count, seed=seed, bl_every=("BM",)).decode()
    bls = [u.bl_number for r in Intake(text.encode()) for u in r.units]
    assert len(bls) == count
    assert len(set(bls)) == count
    assert all(bls)
    return text, [str(b) for b in bls]


def _publish(fleet: Any) -> Any:
    def publish(letter: DeadLetter) -> None:
        fleet.producer.send_task(
            letter.task,
            args=letter.payload["args"],
            kwargs=letter.payload["kwargs"],
            queue=letter.payload["queue"],
            headers={REPLAY_HEADER: letter.replays + 1},
        )

    return publish


def test_poisoned_manifest_completes_then_replays_to_exactly_once(fleet: Any) -> None:
    """2,000 B/Ls, 1 % refused by the TOS: the batch completes, 1,980 accepted, 20 in
    the DLQ with the reason; after the fix, a replay brings the TOS to exactly 2,000
    distinct B/Ls and no duplicate. A second aggregate of the batch forwards nothing."""
    text, bls = _manifest(seed=11)
    poison = set(bls[::100])
    fleet.tos.reject_keys(poison)
    fleet.producer.send_task(
        "bulk.dispatch", args=[{"batch_id": "b-poison", "edifact": text}], queue="bulk.dispatch"
    )

    fleet.wait_for(
        lambda: (
            len(fleet.dlq) == len(poison)
            and fleet.tos.stats(timeline=False)["distinct_keys"] == BLS - len(poison)
        ),
        timeout_s=240,
    )
    letters = list(fleet.dlq.iter())
    assert {letter.bl_number for letter in letters} == poison
    assert {letter.reason for letter in letters} == {
        "downstream rejected the document (HTTP 422 unknown_reference)"
    }
    assert {letter.batch_id for letter in letters} == {"b-poison"}

    summary = BatchStore(fleet.client, prefix=fleet.prefix).summary("b-poison")
    assert summary is not None
    assert (summary["units"], summary["ok"], summary["forwarded"]) == (BLS, BLS, BLS)
    again = fleet.producer.send_task(
        "bulk.aggregate", args=["b-poison"], queue="bulk.dispatch"
    ).get(timeout=30)
    assert again["status"] == "already_aggregated"

    fleet.tos.reject_keys(())  # the fix: the TOS now knows the consignees
    replayed = replay_dead_letters(fleet.dlq, _publish(fleet), limit=100)
    fleet.wait_for(lambda: len(fleet.dlq) == 0, timeout_s=120)

    stats = fleet.tos.stats(timeline=False)
    assert replayed.published == len(poison)
    assert stats["distinct_keys"] == BLS
    assert set(fleet.tos.accepted_keys()) == set(bls)
    assert stats["duplicates"] == 0
    assert "NEVER-FORWARDED" not in fleet.tos.accepted_keys()


def test_replay_of_a_unit_that_fails_again_keeps_it_with_one_more_attempt(fleet: Any) -> None:
    """Not fixed yet: the replayed unit comes back to the DLQ, attempts + 1, never lost."""
    text, bls = _manifest(seed=12, count=300)
    fleet.tos.reject_keys({bls[0]})
    fleet.producer.send_task(
        "bulk.dispatch", args=[{"batch_id": "b-again", "edifact": text}], queue="bulk.dispatch"
    )
    fleet.wait_for(
        lambda: (
            len(fleet.dlq) == 1 and fleet.tos.stats(timeline=False)["distinct_keys"] == len(bls) - 1
        ),
        timeout_s=240,
    )
    (before,) = fleet.dlq.iter()

    replay_dead_letters(fleet.dlq, _publish(fleet), limit=10)
    fleet.wait_for(
        lambda: (fleet.dlq.get(before.key) or before).attempts == before.attempts + 1, timeout_s=60
    )

    after = fleet.dlq.get(before.key)
    assert after is not None
    assert after.replays == 1
    assert after.first_failed_at == before.first_failed_at
    assert bls[0] not in fleet.tos.accepted_keys()


def test_worker_killed_mid_batch_still_gives_every_bl_once(fleet: Any) -> None:
    """SIGKILL a pool process during the fan-out: its unit is redelivered, counts hold.

    800 B/Ls are enough: the kill lands while hundreds are still queued."""
    text, bls = _manifest(seed=13, count=800)
    fleet.producer.send_task(
        "bulk.dispatch", args=[{"batch_id": "b-kill", "edifact": text}], queue="bulk.dispatch"
    )
    fleet.wait_for(lambda: fleet.client.llen("bl.parse") > 200, timeout_s=60)
    children = psutil.Process(fleet.fleet.procs["bulk"].pid).children()
    assert children, "the bulk pool has worker processes"
    os.kill(children[0].pid, signal.SIGKILL)

    fleet.wait_for(
        lambda: fleet.tos.stats(timeline=False)["distinct_keys"] == len(bls), timeout_s=300
    )
    fleet.wait_for(lambda: fleet.client.llen("bl.parse") == 0, timeout_s=60)

    stats = fleet.tos.stats(timeline=False)
    assert set(fleet.tos.accepted_keys()) == set(bls)
    assert stats["duplicates"] == 0
    assert len(fleet.dlq) == 0


def test_unreadable_manifests_are_dead_lettered_not_acknowledged(fleet: Any) -> None:
    """A PDF, and a manifest with garbage after its UNZ: real workers dead-letter each
    whole with the reason (no more ERROR line and an ack), and no B/L reaches the TOS."""
    text, _ = _manifest(seed=13, count=50)
    for batch_id, body in (("b-pdf", "%PDF-1.7 not a manifest"), ("b-tail", text + "UNAUNAUNA")):
        fleet.producer.send_task(
            "bulk.dispatch", args=[{"batch_id": batch_id, "edifact": body}], queue="bulk.dispatch"
        )

    fleet.wait_for(lambda: len(fleet.dlq) == 2, timeout_s=60)
    letters = {letter.key: letter for letter in fleet.dlq.iter()}
    assert set(letters) == {"manifest:b-pdf", "manifest:b-tail"}
    assert letters["manifest:b-pdf"].exception == "NotEdifactError"
    assert letters["manifest:b-tail"].exception == "InvalidServiceStringAdvice"
    assert all(letter.task == "bulk.dispatch" for letter in letters.values())
    assert fleet.tos.stats(timeline=False)["distinct_keys"] == 0
