"""A chaos run's verdict without a fleet: an unplanned dead letter fails the run, and a
run leaves no log folder behind unless it was given one.

The sims are stand-ins (only what ``collect`` reads); the dead-letter queue and the
lease set are the real ones on the session Redis.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from tidegate.harness import chaos
from tidegate.harness.chaos import runner
from tidegate.harness.chaos.slow_downstream import _SlowDownstream
from tidegate.harness.scenarios.vessel import RunHandles, Submission, VesselConfig
from tidegate.load import DeadLetter, DeadLetterQueue

T0 = 1_000.0


class _Sim:
    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def accepted_keys(self) -> list[str]:
        return list(self.keys)

    def stats(self, timeline: bool = True) -> dict[str, Any]:
        return {
            "accept_timeline": [T0 + i * 0.1 for i in range(len(self.keys))],
            "request_timeline": [(T0 + i * 0.1, 200) for i in range(len(self.keys))],
            "max_concurrent_seen": 2,
            "distinct_keys": len(set(self.keys)),
        }


def _submissions() -> list[Submission]:
    docs = [Submission(f"doc-{i}", "edi.tos", {"key": f"doc-{i}"}) for i in range(4)]
    poison = Submission("bad-0", "edi.tos", {"key": "bad-0"}, kind="truncated")
    return [*docs, poison]


def _letter(key: str) -> DeadLetter:
    return DeadLetter(key=key, task="edi.tos.push", reason="downstream rejected the document")


def test_unplanned_dead_letters_are_the_healthy_documents_in_the_dlq() -> None:
    """Only a submission the scenario made malformed may end in the DLQ."""
    letters = [{"key": "bad-0"}, {"key": "doc-2"}, {"key": "stranger"}]

    assert chaos.unplanned_dead_letters(letters, _submissions()) == ["doc-2", "stranger"]
    assert chaos.unplanned_dead_letters([{"key": "bad-0"}], _submissions()) == []


def _collect(client: redis.Redis, prefix: str, dead: list[str]) -> dict[str, Any]:
    dlq = DeadLetterQueue(client, prefix=prefix)
    for key in dead:
        dlq.add(_letter(key))
    submissions = _submissions()
    delivered = [s.key for s in submissions if s.key not in dead]
    run = RunHandles(
        url="",
        prefix=prefix,
        client=client,
        fleet=SimpleNamespace(),  # type: ignore[arg-type]
        customs=_Sim([]),  # type: ignore[arg-type]
        tos=_Sim(delivered),  # type: ignore[arg-type]
        config=VesselConfig(),
        submissions=submissions,
    )
    scenario = _SlowDownstream(chaos.preset("slow-downstream", "test"), None)
    data = scenario.collect(run)
    report = {
        "submitted": len(submissions),
        "delivered": len(delivered),
        "dead_lettered": len(dead),
        "quarantined": 0,
        "refused_at_intake": 0,
        "pending": 0,
        "lost": 0,
        "duplicates": 0,
        "downstreams": {"tos": {"responses_503": 0}},
        "chaos": data,
    }
    return {c.name: c for c in scenario.checks(report)}


@pytest.mark.redis
def test_a_healthy_document_in_the_dlq_fails_the_run(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Every document is "accounted for" (delivered + dead-lettered = submitted), and
    every other check holds; the healthy document in the DLQ alone fails the run."""
    checks = _collect(redis_client, prefix, dead=["bad-0", "doc-1"])

    assert checks["accounted"].ok
    assert not checks["no_unplanned_dead_letter"].ok
    assert checks["no_unplanned_dead_letter"].observed == 1
    assert [name for name, c in checks.items() if not c.ok] == ["no_unplanned_dead_letter"]


@pytest.mark.redis
def test_the_planned_poison_in_the_dlq_passes(redis_client: redis.Redis, prefix: str) -> None:
    checks = _collect(redis_client, prefix, dead=["bad-0"])

    assert all(c.ok for c in checks.values()), checks


class _NoRedis:
    url = "redis://127.0.0.1:1/0"

    def __init__(self, **_: Any) -> None:
        pass

    def start(self) -> _NoRedis:
        return self

    def stop(self) -> None:
        pass


def test_run_chaos_without_a_log_dir_leaves_no_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """run_chaos made a tidegate-chaos-* folder per run and never removed it (the test
    suite's chaos runs left one each)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[Path] = []

    def fake_run(url: str, config: VesselConfig, **kwargs: Any) -> tuple[dict[str, Any], list]:
        log_dir = kwargs["log_dir"]
        (log_dir / "worker-tos.log").write_text("{}\n")
        seen.append(log_dir)
        chaos_data = {
            "unaccounted_keys": [],
            "unplanned_dead_letters": [],
            "dead_letters": [],
            "tos_max_concurrent_seen": 2,
            "max_unacked_age_s": 0.0,
        }
        downstream = {"accepted": 1, "responses_503": 0, "responses_429": 0}
        report = {
            "submitted": 2,
            "delivered": 2,
            "dead_lettered": 0,
            "quarantined": 0,
            "refused_at_intake": 0,
            "pending": 0,
            "lost": 0,
            "duplicates": 0,
            "downstreams": {"customs": downstream, "tos": downstream},
            "config": {},
            "chaos": chaos_data,
            "_timelines": {"customs": [T0], "tos": [T0], "t0": T0},
        }
        return report, []

    monkeypatch.setattr(runner, "EmbeddedRedis", _NoRedis)
    monkeypatch.setattr(runner, "run_vessel_demo", fake_run)

    report, _ = chaos.run_chaos(chaos.preset("slow-downstream", "test"))

    assert report["ok"] is True
    assert seen
    assert seen[0].parent == scratch
    assert list(scratch.iterdir()) == []
    assert report["log_dir"] is None

    kept = tmp_path / "kept"
    kept.mkdir()
    report, _ = chaos.run_chaos(chaos.preset("slow-downstream", "test"), log_dir=kept)
    assert report["log_dir"] == str(kept)
    assert (kept / "worker-tos.log").is_file()
