"""The pieces the chaos scenarios are built from, without a fleet.

The two sim additions (a document check, a runtime service time), the intake's size
check, the poison generator and the gateway's EDIFACT check, the retry-horizon maths,
and the workers' app with its shortened timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import httpx
import pytest

from tidegate.delivery import RetryPolicy
from tidegate.errors import ConfigurationError
from tidegate.harness.burst import vessel_burst
from tidegate.harness.chaos import (
    KINDS,
    POISON_KINDS,
    ChaosConfig,
    WorkerTiming,
    edifact_problem,
    horizon_shorter_than,
    poison_documents,
    preset,
    public,
    retry_horizon,
)
from tidegate.harness.scenarios.vessel import PayloadTooLarge, Submission, check_payload_size
from tidegate.integrations.celery.preset import UNACKED_MUTEX_EXPIRE_S
from tidegate.sim import CustomsSim, TosSim


def _post(sim: CustomsSim | TosSim, body: object, key: str) -> httpx.Response:
    return httpx.post(sim.endpoint, json=body, headers={"Idempotency-Key": key}, timeout=5)


# -- sim additions -------------------------------------------------------------------


def test_document_check_refuses_with_its_code_and_records_nothing() -> None:
    with TosSim(max_connections=2, service_s=0.0) as tos:
        tos.set_document_check(lambda body: None if body.get("ok") else "invalid_document")

        good = _post(tos, {"ok": True}, "k-good")
        bad = _post(tos, {"ok": False}, "k-bad")
        tos.reset()  # the check is part of the downstream, not of its counters
        again = _post(tos, {"ok": False}, "k-bad-2")
        tos.set_document_check(None)
        unchecked = _post(tos, {"ok": False}, "k-bad-3")

    assert good.status_code == 200
    assert (bad.status_code, bad.json()) == (400, {"error": "invalid_document"})
    assert again.status_code == 400
    assert unchecked.status_code == 200
    assert tos.accepted_keys() == ["k-bad-3"]


def test_document_check_costs_no_token() -> None:
    """A refused document is answered before admission: the bucket is untouched."""
    with CustomsSim(rate=0.1, burst=1) as customs:
        customs.set_document_check(lambda body: "not_edifact")
        refused = [_post(customs, {}, f"k{i}").status_code for i in range(3)]
        customs.set_document_check(None)
        accepted = _post(customs, {}, "k-ok").status_code

    assert refused == [400, 400, 400]
    assert accepted == 200


def test_set_service_s_changes_the_latency_of_new_writes() -> None:
    slept: list[float] = []
    lock = threading.Lock()

    def sleep(seconds: float) -> None:
        with lock:
            slept.append(seconds)

    with TosSim(max_connections=4, service_s=0.05, sleep=sleep) as tos:
        _post(tos, {}, "a")
        tos.set_service_s(1.0)
        _post(tos, {}, "b")
        stats = tos.stats(timeline=False)

    assert slept == [0.05, 1.0]
    assert stats["service_s"] == 1.0


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_set_service_s_refuses_nonsense(value: float) -> None:
    tos = TosSim()
    with pytest.raises(ConfigurationError):
        tos.set_service_s(value)


# -- intake size check, poison -------------------------------------------------------


def test_payload_check_passes_the_burst_and_refuses_a_big_envelope() -> None:
    doc = next(vessel_burst(1, seed=1))
    envelope = doc.envelope()

    size = check_payload_size(envelope, limit_bytes=4096)
    with pytest.raises(PayloadTooLarge) as refused:
        check_payload_size({**envelope, "body": "X" * 5000}, limit_bytes=4096)

    assert 0 < size < 4096
    assert refused.value.size > 5000
    assert refused.value.limit == 4096
    assert "above the intake limit of 4096 bytes" in str(refused.value)
    assert doc.key[:16] in str(refused.value)


def test_every_burst_document_passes_the_gateway_check() -> None:
    problems = {edifact_problem({"edifact": d.text}) for d in vessel_burst(500, seed=3)}
    assert problems == {None}


def test_poison_documents_are_mixed_in_with_precise_gateway_codes() -> None:
    burst = [Submission(d.key, d.queue, d.envelope()) for d in vessel_burst(100, seed=5)]

    mixed = poison_documents(burst, per_kind=2, seed=5)

    poison = [s for s in mixed if s.kind != "document"]
    assert len(mixed) == 100 + 2 * (len(POISON_KINDS) + 1)
    assert [s for s in mixed if s.kind == "document"] == burst  # order kept
    assert len({s.key for s in mixed}) == len(mixed)  # new keys: no collision
    codes = {
        s.kind: edifact_problem({"edifact": s.envelope["body"]})
        for s in poison
        if "body" in s.envelope
    }
    assert codes == {
        "truncated": "truncated_interchange",
        "not_edifact": "not_edifact",
        "reference_mismatch": "message_reference_mismatch",
        "oversized": None,  # well-formed, only too big
    }
    assert all("body" not in s.envelope for s in poison if s.kind == "missing_body")
    oversized = [s for s in poison if s.kind == "oversized"]
    with pytest.raises(PayloadTooLarge):
        check_payload_size(oversized[0].envelope, limit_bytes=256 * 1024)


def test_gateway_check_names_a_missing_edifact_body() -> None:
    assert edifact_problem({"type": "VERMAS"}) == "missing_edifact"
    assert edifact_problem("not a mapping") == "missing_edifact"


# -- the retry horizon ---------------------------------------------------------------


def test_retry_horizon_of_the_default_policy() -> None:
    """Seven full-jitter delays with ceilings 1, 2, 4 … 32, 60 s sum to 0–123 s; the
    600 s minimum horizon is what an operator can count on."""
    horizon = retry_horizon(samples=20_000)

    assert horizon.delays == RetryPolicy().max_attempts - 1 == 7
    assert horizon.ceilings_s == (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)
    assert horizon.min_horizon_s == 600.0
    assert horizon.p01_s == horizon.max_s == horizon.mean_s == 600.0
    # No outage shorter than the horizon can dead-letter a unit, whatever jitter drew.
    assert horizon_shorter_than(60.0, samples=20_000) == 0.0
    assert horizon_shorter_than(599.0, samples=20_000) == 0.0
    assert horizon_shorter_than(601.0, samples=20_000) == 1.0


def test_without_a_minimum_the_jitter_alone_sets_the_horizon() -> None:
    """The reason the minimum exists: full jitter gives no floor."""
    policy = RetryPolicy(min_horizon_s=0)
    horizon = retry_horizon(policy, samples=20_000)
    assert horizon.max_s == 123.0
    assert 60 < horizon.mean_s < 63
    assert horizon.p01_s < horizon.p05_s < horizon.p50_s < horizon.p95_s < horizon.max_s
    # A 60 s outage would dead-letter a unit retrying back to back about half the time.
    assert 0.4 < horizon_shorter_than(60.0, policy, samples=20_000) < 0.55


def test_retry_horizon_follows_the_policy() -> None:
    policy = RetryPolicy(max_attempts=3, min_horizon_s=4.0, backoff_base_s=2.0, backoff_cap_s=3.0)
    horizon = retry_horizon(policy, samples=1000)
    assert horizon.ceilings_s == (2.0, 3.0)
    assert horizon.max_s == 5.0
    assert horizon.p01_s == 4.0


# -- configuration and the workers' app ----------------------------------------------


def test_worker_timing_keeps_the_presets_rule() -> None:
    with pytest.raises(ConfigurationError, match="2 × hard_time_limit_s"):
        WorkerTiming(soft_time_limit_s=8, hard_time_limit_s=10, visibility_timeout_s=15)
    with pytest.raises(ConfigurationError, match="soft_time_limit_s"):
        WorkerTiming(soft_time_limit_s=10, hard_time_limit_s=10, visibility_timeout_s=60)
    timing = WorkerTiming()
    lock_s = UNACKED_MUTEX_EXPIRE_S  # a main killed holding kombu's restore lock
    assert timing.worst_redelivery_s == (
        timing.visibility_timeout_s + lock_s + timing.restore_interval_s
    )


def test_presets_exist_for_every_kind_and_size() -> None:
    for kind in KINDS:
        full, trimmed = preset(kind, "full"), preset(kind, "test")
        assert full.kind == trimmed.kind == kind
        assert trimmed.vessel.interchanges < full.vessel.interchanges
        assert full.vessel_run.app == "tidegate.harness.chaos.worker_app:worker_app"
    assert preset("kill-workers").vessel.interchanges == 10_000
    with pytest.raises(ConfigurationError, match="unknown chaos kind"):
        ChaosConfig("meteor-strike")  # type: ignore[arg-type]


def test_worker_app_is_the_vessel_app_with_chaos_timing() -> None:
    """What ``celery -A tidegate.harness.chaos.worker_app:worker_app`` loads, in a fresh process."""
    code = (
        "import json; from tidegate.harness.chaos.worker_app import worker_app as app; "
        "c = app.conf; "
        "print(json.dumps([app.main, c.task_time_limit, c.task_soft_time_limit, "
        "c.broker_transport_options, sorted(t for t in app.tasks if t.startswith('edi.'))]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TIDEGATE_VISIBILITY_TIMEOUT_S"}
    env.update(WorkerTiming(8, 10, 20, 0.5, 3).env())
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    main, hard, soft, transport, tasks = json.loads(out.stdout.strip().splitlines()[-1])

    assert main == "tidegate-vessel"
    assert (hard, soft) == (10.0, 8.0)
    assert transport == {
        "visibility_timeout": 20.0,
        "unacked_restore_interval": 0.5,
        "unacked_restore_throttle": 1,
        # the preset's: a main killed holding kombu's restore lock holds it this long
        "unacked_mutex_expire": UNACKED_MUTEX_EXPIRE_S,
    }
    assert {"edi.customs.submit", "edi.tos.push"} <= set(tasks)


def test_worker_app_refuses_a_too_short_visibility_timeout() -> None:
    code = "from tidegate.harness.chaos.worker_app import worker_app"
    env = {**os.environ, **WorkerTiming(8, 10, 20).env(), "TIDEGATE_CHAOS_HARD_TIME_LIMIT_S": "30"}
    env.pop("TIDEGATE_VISIBILITY_TIMEOUT_S", None)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "visibility_timeout=20s is not comfortably above the hard time limit" in result.stderr


def test_public_drops_bulky_private_entries() -> None:
    report = {"a": 1, "_timeline": [1, 2], "chaos": {"b": [{"_x": 1, "y": 2}], "_raw": {}}}
    assert public(report) == {"a": 1, "chaos": {"b": [{"y": 2}]}}


def test_cli_offers_exactly_the_chaos_scenarios() -> None:
    from tidegate.cli.demo import CHAOS_KINDS

    assert CHAOS_KINDS == KINDS


def test_cli_refuses_chaos_outside_the_vessel_scenario() -> None:
    from click.testing import CliRunner

    from tidegate.cli import cli

    result = CliRunner().invoke(cli, ["demo", "--scenario", "gate", "--chaos", "poison"])

    assert result.exit_code == 2
    assert "--chaos applies to --scenario vessel" in result.output
