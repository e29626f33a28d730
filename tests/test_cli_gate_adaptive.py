"""`tidegate gate set --adaptive …` and `gate show`'s adaptive part, against a real Redis."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner, Result

from tidegate.cli import cli
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptivePolicy,
    RatePolicy,
    RateWindow,
    RedisAdaptiveStore,
)
from tidegate.keys import Keyspace

pytestmark = pytest.mark.redis


def invoke(url: str, *args: str) -> Result:
    """The operator's shell: only the Redis URL, none of pytest's environment."""
    env: dict[str, str | None] = {
        "TIDEGATE_PREFIX": None,
        "REDIS_URL": None,
        "TIDEGATE_LOG_FILE": None,
        "TIDEGATE_CUSTOMS_RATE": None,
        "TIDEGATE_REDIS_URL": url,
    }
    return CliRunner().invoke(cli, list(args), env=env)


def test_set_writes_the_overrides_every_controller_reads(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """--adaptive freeze --max-rate 8 --suspension-prone: stored for the fleet, and a
    worker's controller (configured otherwise) now runs with them."""
    made = invoke(
        redis_url, "gate", "set", "customs", "--create", "--adaptive", "freeze",
        "--max-rate", "8", "--suspension-prone", "--json", "--prefix", prefix,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    shown = json.loads(made.output)["adaptive"]
    assert shown["overrides"] == {"mode": "frozen", "max_rate": "8.0", "suspension_prone": "true"}

    worker = AdaptiveController(
        RedisAdaptiveStore(redis_client),
        "customs",
        AdaptivePolicy(rate=RatePolicy(min_rate=1.0, max_rate=50.0)),
        prefix=prefix,
    )
    policy = worker.effective_policy()
    assert policy.mode == "frozen"
    assert policy.rate is not None
    assert (policy.rate.max_rate, policy.rate.suspension_prone) == (8.0, True)


def test_a_box_upside_down_is_refused_and_nothing_is_written(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """--min-rate 9 --max-rate 3: a usage error naming the flags; no override, and the
    gate's --rate given with it is not applied either."""
    made = invoke(
        redis_url, "gate", "set", "customs", "--create", "--rate", "2",
        "--min-rate", "9", "--max-rate", "3", "--prefix", prefix,
    )  # fmt: skip

    assert made.exit_code == 2
    assert "--min-rate" in made.output
    assert list(redis_client.scan_iter(match=Keyspace(prefix).everything())) == []


def test_show_prints_what_the_fleet_learned_and_its_history(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """After a 429 at 10/s the controller learned 9/s under a ceiling of 9: show --json
    carries the learned rate, the ceiling, the controller and the change event."""
    controller = AdaptiveController(
        RedisAdaptiveStore(redis_client),
        "customs",
        AdaptivePolicy(
            rate=RatePolicy(min_rate=1.0, max_rate=50.0, start_rate=10.0, suspension_prone=True)
        ),
        prefix=prefix,
        holder="worker-1",
    )
    controller.tick(RateWindow(throttled=1))
    invoke(redis_url, "gate", "set", "customs", "--create", "--rate", "9", "--prefix", prefix)

    shown = invoke(redis_url, "gate", "show", "customs", "--json", "--prefix", prefix)
    table = invoke(redis_url, "gate", "show", "customs", "--prefix", prefix)

    assert shown.exit_code == 0, shown.output
    adaptive = json.loads(shown.output)["adaptive"]
    assert (adaptive["learned_rate"], adaptive["ceiling"]) == (9.0, 9.0)
    assert adaptive["controller"] == "worker-1"
    assert [event["reason"] for event in adaptive["history"]] == ["throttled"]
    assert "learned rate" in table.output
    assert "throttled" in table.output
