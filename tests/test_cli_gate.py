"""`tidegate gate …` against a real Redis, as an operator would run it."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.flow import Gate

pytestmark = pytest.mark.redis


def invoke(*args: str, url: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"TIDEGATE_REDIS_URL": url})
    return result.exit_code, result.output


def test_set_then_show_retunes_the_running_gate(redis_url: str, redis_client: redis.Redis) -> None:
    """`gate set` changes what every Gate object (every worker) sees; `show --json` reports it."""
    name = "customs-cli-set"
    code, _ = invoke("gate", "set", name, "--rate", "0.5", "--burst", "2", url=redis_url)
    assert code == 0

    code, out = invoke("gate", "show", name, "--json", url=redis_url)

    shown = json.loads(out)
    assert code == 0
    assert (shown["rate"], shown["burst"]) == (0.5, 2)
    assert shown["overridden"] == ["burst", "rate"]
    assert Gate(redis_client, name).state().policy.burst == 2
    redis_client.delete(f"tidegate:gate:{{{name}}}:config")


def test_removing_the_concurrency_cap_needs_yes(redis_url: str, redis_client: redis.Redis) -> None:
    """A change that removes a protection from the whole fleet is confirmed explicitly."""
    name = "tos-cli-cap"
    invoke("gate", "set", name, "--concurrency", "4", url=redis_url)

    refused_code, refused_out = invoke("gate", "set", name, "--concurrency", "0", url=redis_url)
    still = Gate(redis_client, name).state().policy.concurrency
    ok_code, _ = invoke("gate", "set", name, "--concurrency", "0", "--yes", url=redis_url)

    assert refused_code != 0
    assert "--yes" in refused_out
    assert still == 4
    assert ok_code == 0
    assert Gate(redis_client, name).state().policy.concurrency == 0
    redis_client.delete(f"tidegate:gate:{{{name}}}:config")


def test_invalid_value_is_a_usage_error_and_changes_nothing(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """`--rate 0` is refused with the offending value named."""
    code, out = invoke("gate", "set", "customs-cli-bad", "--rate", "0", url=redis_url)

    assert code == 2
    assert "rate" in out
    assert redis_client.exists("tidegate:gate:{customs-cli-bad}:config") == 0


def test_pause_and_resume(redis_url: str, redis_client: redis.Redis) -> None:
    """An operator can pause a downstream for the whole fleet and lift the pause."""
    name = "customs-cli-pause"
    code, out = invoke("gate", "pause", name, "30", "--reason", "maintenance", url=redis_url)
    assert code == 0
    assert "paused" in out
    assert Gate(redis_client, name).state().pause_reason == "maintenance"

    invoke("gate", "resume", name, url=redis_url)
    assert Gate(redis_client, name).state().paused_for_s == 0


def test_password_in_the_url_is_never_printed() -> None:
    """An unreachable Redis with credentials: the error names the problem, not the secret."""
    result = CliRunner().invoke(
        cli,
        ["gate", "show", "customs"],
        env={"TIDEGATE_REDIS_URL": "redis://ops:s3cret-pw@127.0.0.1:1/0"},
    )

    assert result.exit_code != 0
    assert "s3cret-pw" not in result.output
    help_text = CliRunner().invoke(
        cli, ["gate", "show", "--help"], env={"TIDEGATE_REDIS_URL": "redis://ops:s3cret-pw@h:1/0"}
    )
    assert "s3cret-pw" not in help_text.output
