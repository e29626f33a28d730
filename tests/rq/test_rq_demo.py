"""``tidegate demo --engine rq``: the vessel burst through real RQ workers, small sizes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.harness.scenarios.rq_vessel import RqKillWorkers, run_rq_vessel_demo
from tidegate.harness.scenarios.vessel import VesselConfig
from tidegate.redis_server import redis_url as embedded_redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def own_redis() -> Iterator[str]:
    """An embedded Redis of its own: the demo's workers flush nothing, but they run
    RQ's maintenance over every queue of the server they are on."""
    with embedded_redis() as url:
        yield url


def test_the_vessel_burst_through_rq_is_reconciled_key_by_key(own_redis: str) -> None:
    """Every submitted key ends delivered (the sims' own record), none twice; the
    report has the vessel demo's fields."""
    config = VesselConfig(interchanges=60, customs_rate=20, customs_burst=5, timeout_s=240)
    report, samples = run_rq_vessel_demo(own_redis, config)
    assert report["engine"] == "rq"
    assert report["submitted"] == 60
    assert (report["delivered"], report["lost"], report["pending"]) == (60, 0, 0)
    assert (report["accepted_twice"], report["duplicates"]) == (0, 0)
    assert report["downstreams"]["customs"]["responses_429"] == 0
    assert samples


@pytest.mark.parametrize("worker", ["fork", "in-process"])
def test_killed_rq_workers_lose_nothing_and_send_nothing_twice(own_redis: str, worker: str) -> None:
    """Work horses (forking) and whole workers are SIGKILLed mid-burst: every key still
    ends delivered once; RQ gave the killed jobs back and the lifecycle reconciled them."""
    config = VesselConfig(interchanges=120, customs_rate=20, customs_burst=5, timeout_s=400)
    kill = RqKillWorkers(fault_at_s=1.0, kill_every_s=1.0, main_kill_every=2, kill_until=0.9)
    report, _ = run_rq_vessel_demo(own_redis, config, kill=kill, worker=worker)
    chaos = report["chaos"]
    assert report["rq_worker"] == worker
    if worker == "fork":
        assert chaos["kills_by_role"].get("work_horse", 0) >= 1, chaos
    assert chaos["kills_by_role"].get("worker", 0) >= 1, chaos
    assert (report["lost"], report["pending"], report["accepted_twice"]) == (0, 0, 0), report
    assert report["delivered"] + report["dead_lettered"] == 120
    assert report["ok"], chaos["checks"]


@pytest.mark.parametrize(
    "args",
    [["--scenario", "bulk"], ["--scenario", "gate"], ["--chaos", "poison"]],
    ids=["bulk", "gate", "poison"],
)
def test_engine_rq_is_refused_where_it_has_no_run(args: list[str]) -> None:
    """RQ runs the vessel burst, alone or under kill-workers; anything else is a
    usage error, before anything starts."""
    result = CliRunner().invoke(cli, ["demo", "--engine", "rq", *args])
    assert result.exit_code == 2
    assert "--engine rq runs --scenario vessel" in result.output
