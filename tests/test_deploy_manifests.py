"""deploy/ against the code: metric names exist, and the scalers' numbers agree with the monitor's.

The manifests are parsed (YAML, the dashboard's JSON, PromQL as text); the exported
names come from the real collector scraping a real Redis that holds one of everything.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidegate.events import DownstreamAnswered429, GatePaused, GateThrottled
from tidegate.load.depth import QueueDepth
from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import BoardEntry, GateView, LoadBoard, LoadState, Watermarks
from tidegate.ops.metrics import EventCounters, registry_for

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
METRIC = re.compile(r"\btidegate_[a-z0-9_]+\b")


def _documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]


def _monitor() -> dict[str, Any]:
    """The monitor Deployment's flags and environment, parsed."""
    (deployment,) = [d for d in _documents("monitor.yaml") if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    flags: dict[str, list[str]] = {}
    for arg in container["args"]:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            flags.setdefault(name, []).append(value)
    env = {e["name"]: e.get("value") for e in container["env"]}
    return {
        "queues": {q.partition("=")[0] for q in flags["queue"]},
        "min_workers": int(flags["min-workers"][0]),
        "max_workers": int(flags["max-workers"][0]),
        "backlog_per_worker": int(flags["backlog-per-worker"][0]),
        "env": env,
    }


def _scalers() -> list[dict[str, Any]]:
    """Every scaler on tidegate_desired_workers: its floor, ceiling, target, queue."""
    out = []
    for obj in _documents("keda-scaledobject.yaml"):
        spec = obj["spec"]
        (trigger,) = [t for t in spec["triggers"] if t["type"] == "prometheus"]
        out.append(
            {
                "name": obj["metadata"]["name"],
                "min": spec["minReplicaCount"],
                "max": spec["maxReplicaCount"],
                "per_pod": float(trigger["metadata"]["threshold"]),
                "query": trigger["metadata"]["query"],
                "trigger": trigger["metadata"],
                "fallback": spec.get("fallback"),
                "target": spec["scaleTargetRef"]["name"],
            }
        )
    for hpa in _documents("hpa.yaml"):
        spec = hpa["spec"]
        (metric,) = spec["metrics"]
        external = metric["external"]
        out.append(
            {
                "name": hpa["metadata"]["name"],
                "min": spec["minReplicas"],
                "max": spec["maxReplicas"],
                "per_pod": float(external["target"]["averageValue"]),
                "query": f"{external['metric']['name']}"
                f'{{queue="{external["metric"]["selector"]["matchLabels"]["queue"]}"}}',
                "trigger": None,
                "fallback": None,
                "target": spec["scaleTargetRef"]["name"],
            }
        )
    return out


@pytest.fixture
def exported(redis_client: redis.Redis, prefix: str) -> set[str]:
    """Family and sample names the collector serves when Redis holds one of everything."""
    board = LoadBoard(redis_client, prefix=prefix)
    gate = GateView("customs", rate=10.0, burst=2, concurrency=4, paused_for_s=1.0)
    state = LoadState("edi.customs", depth=120, desired_workers=3, quota_workers=5)
    board.publish(
        [
            BoardEntry(
                state,
                QueueDepth("edi.customs", 100, 20, consumers=2),
                Watermarks(1000, 100),
                gate,
                board.now_ms(),
                5.0,
            )
        ]
    )
    counters = EventCounters(redis_client, prefix=prefix)
    for event in (
        GateThrottled("customs", "rate", 0.2, 0, "reserve"),
        GatePaused("customs", 5.0, "http_429", extended=False, until_ms=0),
        DownstreamAnswered429(None, False, "customs", "/declarations", 429, "0" * 16),
    ):
        counters(event)
    assert counters.dropped == 0
    quarantine = Quarantine(redis_client, prefix=prefix)
    for key in ("q1", "q2"):
        quarantine.add(
            QuarantinedDocument(key, "BULK_BL_PDF", "bulk.documents", "bulk.documents.store")
        )
    (replayed,) = quarantine.claim("bulk.documents", 1)
    assert quarantine.ack(replayed)
    DeadLetterQueue(redis_client, prefix=prefix).add(DeadLetter(key="d1", task="t", reason="r"))
    text = generate_latest(registry_for(redis_client, prefix=prefix)).decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


@pytest.mark.redis
def test_every_metric_named_in_deploy_is_one_the_code_exports(exported: set[str]) -> None:
    """A renamed metric would leave a scaler, an alert or a panel on an empty series.

    Read as text, comments and prose included: what the files tell an operator to look
    for must exist too. The YAML and the dashboard must still parse.
    """
    used: dict[str, set[str]] = {}
    for path in sorted(DEPLOY.iterdir()):
        if path.suffix in {".yaml", ".yml"}:
            assert _documents(path.name)
        elif path.suffix == ".json":
            assert json.loads(path.read_text())["panels"]
        for name in METRIC.findall(path.read_text()):
            used.setdefault(name, set()).add(path.name)

    unknown = {name: sorted(files) for name, files in used.items() if name not in exported}
    assert len(used) > 20
    assert unknown == {}


def test_the_scalers_floor_and_ceiling_are_reachable_from_the_monitors_range() -> None:
    """Issue #11.6: bulk said "may scale to zero" while the monitor passed --min-workers=1.

    replicas = ceil(desired_workers / per_pod) with desired in [min_workers, max_workers]:
    the lowest reachable count must not exceed minReplicaCount, and maxReplicaCount is
    the monitor's ceiling in pods.
    """
    monitor = _monitor()
    scalers = _scalers()

    assert {s["name"] for s in scalers} >= {"tidegate-workers-customs", "tidegate-workers-bulk"}
    for scaler in scalers:
        floor = math.ceil(monitor["min_workers"] / scaler["per_pod"])
        assert floor <= scaler["min"], scaler["name"]
        assert scaler["max"] == math.ceil(monitor["max_workers"] / scaler["per_pod"]), scaler[
            "name"
        ]
        assert 0 <= scaler["min"] <= scaler["max"], scaler["name"]
        assert set(re.findall(r'queue="([^"]+)"', scaler["query"])) <= monitor["queues"]
    customs = [s for s in scalers if s["target"] == "celery-customs"]
    assert customs
    assert all(s["min"] >= 1 for s in customs)  # customs filings always have a consumer


def test_keda_treats_a_withheld_sample_as_an_error_and_falls_back() -> None:
    """A stale sample is not exported; KEDA must not read the empty answer as 0."""
    for scaler in _scalers():
        if scaler["trigger"] is None:
            continue
        assert scaler["trigger"]["ignoreNullValues"] == "false", scaler["name"]
        fallback = scaler["fallback"]
        assert fallback is not None, scaler["name"]
        assert scaler["min"] <= fallback["replicas"] <= scaler["max"], scaler["name"]
        assert fallback["failureThreshold"] >= 1


def test_alerts_cover_a_stale_and_a_missing_monitor() -> None:
    """Stale: the collector's own flag. Missing: a series exported even when stale is absent."""
    (rules,) = _documents("prometheus-rules.yaml")
    exprs = {
        rule["alert"]: rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]
    }

    assert "tidegate_monitor_sample_stale" in exprs["TidegateMonitorStale"]
    assert re.fullmatch(
        r"absent\(tidegate_monitor_sample_(age_seconds|stale)\)",
        exprs["TidegateMonitorMissing"].strip(),
    )


def test_the_redis_lists_scaler_repeats_the_monitors_numbers() -> None:
    """keda-redis-lists.yaml cannot read /metrics: its hand-copied numbers must match.

    listLength = backlog per worker × processes per pod (the Prometheus object's
    threshold for the same Deployment); activationListLength = the LWM.
    """
    monitor = _monitor()
    per_pod = {s["target"]: s["per_pod"] for s in _scalers()}
    (lists,) = _documents("keda-redis-lists.yaml")
    target = lists["spec"]["scaleTargetRef"]["name"]

    for trigger in lists["spec"]["triggers"]:
        meta = trigger["metadata"]
        assert meta["listName"].split("\x06")[0] in monitor["queues"]
        assert float(meta["listLength"]) == monitor["backlog_per_worker"] * per_pod[target]
        assert meta["activationListLength"] == monitor["env"]["TIDEGATE_QUEUE_LWM"]
