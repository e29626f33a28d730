"""`tidegate gate …` against a real Redis, as an operator would run it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from tidegate.cli import cli
from tidegate.flow import Gate
from tidegate.keys import Keyspace
from tidegate.settings import GatePolicy

pytestmark = pytest.mark.redis

#: The operator's shell: only what a test sets, never the environment pytest runs in.
CLEAN_ENV: dict[str, str | None] = {
    "TIDEGATE_PREFIX": None,
    "TIDEGATE_REDIS_URL": None,
    "REDIS_URL": None,
    "TIDEGATE_LOG_FILE": None,
    "TIDEGATE_CUSTOMS_RATE": None,
    "TIDEGATE_TOS_RATE": None,
}


def invoke(url: str, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(
        cli, list(args), env={**CLEAN_ENV, "TIDEGATE_REDIS_URL": url, **(env or {})}
    )


def strict_json(text: str) -> Any:
    """Parse as JSON proper: ``Infinity`` or ``NaN`` is an error, as in any other parser."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def fleet_keys(client: redis.Redis, prefix: str) -> list[bytes]:
    return sorted(client.scan_iter(match=Keyspace(prefix).everything()))


def test_set_then_show_retunes_the_running_gate(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """`gate set` changes what every Gate object (every worker) sees; `show --json` says so."""
    made = invoke(
        redis_url,
        "gate",
        "set",
        "customs",
        "--rate",
        "0.5",
        "--burst",
        "2",
        "--create",
        "--prefix",
        prefix,
    )
    assert made.exit_code == 0, made.output

    shown = invoke(redis_url, "gate", "show", "customs", "--json", "--prefix", prefix)

    state = strict_json(shown.stdout)
    assert shown.exit_code == 0
    assert (state["rate"], state["burst"], state["prefix"]) == (0.5, 2, prefix)
    assert state["overridden"] == ["burst", "rate"]
    assert state["sources"] == {
        "rate": "live (set by gate set)",
        "burst": "live (set by gate set)",
        "concurrency": "default",
        "lease_s": "default",
    }
    assert Gate(redis_client, "customs", prefix=prefix).state().policy.burst == 2


def test_show_reports_the_fleets_values_not_this_shells_defaults(
    redis_url: str, prefix: str
) -> None:
    """A TIDEGATE_CUSTOMS_RATE in the operator's shell is not what the workers use."""
    invoke(redis_url, "gate", "set", "customs", "--burst", "3", "--create", "--prefix", prefix)

    shown = invoke(
        redis_url,
        "gate",
        "show",
        "customs",
        "--json",
        "--prefix",
        prefix,
        env={"TIDEGATE_CUSTOMS_RATE": "9"},
    )
    table = invoke(redis_url, "gate", "show", "customs", "--prefix", prefix)

    state = strict_json(shown.stdout)
    assert (state["rate"], state["sources"]["rate"]) == (GatePolicy().rate, "default")
    rate_row = next(line for line in table.stdout.splitlines() if line.strip().startswith("rate"))
    burst_row = next(line for line in table.stdout.splitlines() if "burst" in line)
    assert rate_row.split()[-1] == "default"
    assert "live (set by gate set)" in burst_row


def test_prefix_addresses_one_fleet_from_flag_or_environment(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """`--prefix` and TIDEGATE_PREFIX pick the fleet; another fleet's gate is untouched."""
    other = f"{prefix}-b"
    for fleet in (prefix, other):
        Gate(redis_client, "customs", policy=GatePolicy(), prefix=fleet).configure(rate=1.0)

    by_flag = invoke(redis_url, "gate", "set", "customs", "--rate", "4", "--prefix", prefix)
    by_env = invoke(redis_url, "gate", "pause", "customs", "60", env={"TIDEGATE_PREFIX": prefix})

    try:
        mine = Gate(redis_client, "customs", prefix=prefix).state()
        theirs = Gate(redis_client, "customs", prefix=other).state()
    finally:
        redis_client.delete(*fleet_keys(redis_client, other))
    assert (by_flag.exit_code, by_env.exit_code) == (0, 0), by_flag.output + by_env.output
    assert (mine.policy.rate, mine.pause_reason) == (4.0, "operator")
    assert (theirs.policy.rate, theirs.paused_for_s) == (1.0, 0.0)


def test_a_prefix_that_is_not_a_key_prefix_is_refused(redis_url: str) -> None:
    """A glob character in --prefix would make `ls` read other fleets' keys."""
    result = invoke(redis_url, "gate", "ls", "--prefix", "tide*")

    assert result.exit_code == 2
    assert "--prefix" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("show", "custmos"),
        ("show", "custmos", "--json"),
        ("resume", "nothere"),
        ("pause", "nothere", "30"),
        ("set", "nothere", "--rate", "2"),
    ],
)
def test_unknown_gate_names_are_refused_and_nothing_is_written(
    redis_url: str, redis_client: redis.Redis, prefix: str, args: tuple[str, ...]
) -> None:
    """A typo never prints made-up defaults, "resumes" nothing, nor creates a gate."""
    Gate(redis_client, "customs", policy=GatePolicy(), prefix=prefix).configure(rate=2.0)
    before = fleet_keys(redis_client, prefix)

    result = invoke(redis_url, "gate", *args, "--prefix", prefix)

    assert result.exit_code == 1
    assert f"no gate {args[1]!r} under prefix {prefix!r}" in result.output
    assert "gates with state: customs" in result.output
    assert result.stdout == ""
    assert fleet_keys(redis_client, prefix) == before


def test_a_gate_configured_in_this_shell_exists(redis_url: str, prefix: str) -> None:
    """TIDEGATE_<NAME>_* in the operator's environment makes an idle gate addressable."""
    result = invoke(
        redis_url, "gate", "show", "tos", "--prefix", prefix, env={"TIDEGATE_TOS_RATE": "2"}
    )

    assert result.exit_code == 0, result.output


def test_resume_says_when_there_was_no_pause(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """`resume` reports what it did: it ends a pause, or says there was none."""
    Gate(redis_client, "customs", policy=GatePolicy(), prefix=prefix).configure(rate=2.0)

    idle = invoke(redis_url, "gate", "resume", "customs", "--prefix", prefix)
    invoke(redis_url, "gate", "pause", "customs", "30", "--prefix", prefix)
    ended = invoke(redis_url, "gate", "resume", "customs", "--prefix", prefix)

    assert idle.stdout.strip() == "gate customs was not paused"
    assert ended.stdout.startswith("gate customs resumed (the pause had ")
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0


def test_ls_lists_the_gates_with_state_as_table_and_json(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """`gate ls` lists exactly the gates under this prefix, with their live values."""
    Gate(redis_client, "customs", policy=GatePolicy(), prefix=prefix).configure(rate=0.5)
    Gate(redis_client, "tos", policy=GatePolicy(), prefix=prefix).pause(45, "maintenance")

    table = invoke(redis_url, "gate", "ls", "--prefix", prefix)
    listed = invoke(redis_url, "gate", "ls", "--json", "--prefix", prefix)

    rows = [line.split() for line in table.stdout.splitlines()]
    assert table.exit_code == 0
    assert ["customs", "0.5", "1", "0", "30.0", "rate", "no", "0"] in rows
    assert [row[0] for row in rows if row and row[0] in {"customs", "tos"}] == ["customs", "tos"]
    gates = strict_json(listed.stdout)
    assert [(g["name"], g["rate"], g["pause_reason"]) for g in gates] == [
        ("customs", 0.5, None),
        ("tos", 1.0, "maintenance"),
    ]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("set", "customs", "--lease-s", "1e308"), "--lease-s"),
        (("set", "customs", "--lease-s", "inf"), "--lease-s"),
        (("set", "customs", "--rate", "1e308"), "--rate"),
        (("set", "customs", "--rate", "nan"), "--rate"),
        (("set", "customs", "--rate", "0"), "--rate"),
        (("set", "customs", "--burst", "100000000000000000000000"), "--burst"),
        (("set", "customs", "--concurrency", "1000000000000"), "--concurrency"),
        (("set", "customs", "--rate", "5", "--lease-s", "1e308"), "--lease-s"),
        (("pause", "customs", "1e14"), "SECONDS"),
        (("pause", "customs", "1e13"), "SECONDS"),
        (("pause", "customs", "nan"), "SECONDS"),
    ],
)
def test_out_of_range_input_is_a_usage_error_that_writes_nothing(
    redis_url: str, redis_client: redis.Redis, prefix: str, args: tuple[str, ...], flag: str
) -> None:
    """Every numeric input has a range, checked before anything is written; the error
    names what the operator typed; the gate stays readable afterwards."""
    Gate(redis_client, "customs", policy=GatePolicy(), prefix=prefix).configure(rate=2.0)
    before = {key: redis_client.dump(key) for key in fleet_keys(redis_client, prefix)}

    result = invoke(redis_url, "gate", *args, "--prefix", prefix)
    after = invoke(redis_url, "gate", "show", "customs", "--json", "--prefix", prefix)

    assert result.exit_code == 2
    assert flag in result.output
    assert "Traceback" not in result.output
    assert {key: redis_client.dump(key) for key in fleet_keys(redis_client, prefix)} == before
    assert after.exit_code == 0
    assert strict_json(after.stdout)["rate"] == 2.0


def test_show_json_is_json_even_when_a_stored_value_is_corrupt(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """An infinite lease stored by an older version is shown as invalid, and can be fixed."""
    redis_client.hset(Keyspace(prefix).limit("customs").config, "lease_ms", "inf")

    shown = invoke(redis_url, "gate", "show", "customs", "--json", "--prefix", prefix)
    table = invoke(redis_url, "gate", "show", "customs", "--prefix", prefix)
    fixed = invoke(
        redis_url, "gate", "set", "customs", "--lease-s", "20", "--json", "--prefix", prefix
    )

    assert shown.exit_code == 0, shown.output
    assert strict_json(shown.stdout)["invalid"] == {"lease_s": "inf"}
    assert "INVALID" in table.stdout
    assert "gate set --lease-s" in table.stdout
    assert fixed.exit_code == 0, fixed.output
    assert strict_json(fixed.stdout)["lease_s"] == 20.0
    assert strict_json(fixed.stdout)["invalid"] == {}


def test_decision_events_go_to_the_log_stream_never_stdout(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """stdout holds the answer alone; the event is one JSON line on stderr or in --log-file."""
    to_stderr = invoke(
        redis_url, "gate", "set", "customs", "--rate", "3", "--create", "--json", "--prefix", prefix
    )
    log_file = tmp_path / "audit.jsonl"
    to_file = invoke(
        redis_url,
        "--log-file",
        str(log_file),
        "gate",
        "set",
        "customs",
        "--rate",
        "4",
        "--prefix",
        prefix,
    )

    assert strict_json(to_stderr.stdout)["rate"] == 3.0
    (event,) = [json.loads(line) for line in to_stderr.stderr.splitlines()]
    assert (event["event"], event["downstream"], event["rate"]) == (
        "downstream_gate_configured",
        "customs",
        3.0,
    )
    assert to_file.exit_code == 0, to_file.output
    assert to_file.stderr == ""
    assert "{" not in to_file.stdout
    (logged,) = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert (logged["event"], logged["rate"]) == ("downstream_gate_configured", 4.0)


def test_removing_the_concurrency_cap_needs_yes(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """A change that removes a protection from the whole fleet is confirmed explicitly."""
    invoke(redis_url, "gate", "set", "tos", "--concurrency", "4", "--create", "--prefix", prefix)

    refused = invoke(redis_url, "gate", "set", "tos", "--concurrency", "0", "--prefix", prefix)
    still = Gate(redis_client, "tos", prefix=prefix).state().policy.concurrency
    ok = invoke(redis_url, "gate", "set", "tos", "--concurrency", "0", "--yes", "--prefix", prefix)

    assert refused.exit_code != 0
    assert "--yes" in refused.output
    assert still == 4
    assert ok.exit_code == 0
    assert Gate(redis_client, "tos", prefix=prefix).state().policy.concurrency == 0


def test_pause_and_resume(redis_url: str, redis_client: redis.Redis, prefix: str) -> None:
    """An operator can pause a downstream for the whole fleet and lift the pause."""
    paused = invoke(
        redis_url,
        "gate",
        "pause",
        "customs",
        "30",
        "--reason",
        "maintenance",
        "--create",
        "--prefix",
        prefix,
    )
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.stdout
    assert Gate(redis_client, "customs", prefix=prefix).state().pause_reason == "maintenance"

    invoke(redis_url, "gate", "resume", "customs", "--prefix", prefix)
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0


@pytest.mark.parametrize("secret", ["s3cr/et", "s3cr#et", "s3cr?et", "12/s3cr", "s3cr#et?x/y"])
def test_a_password_is_never_printed_whatever_it_holds(secret: str) -> None:
    """A password with "/", "#" or "?" that was not percent-encoded: a clean error
    naming the flag, no traceback, and no piece of the password."""
    url = f"redis://ops:{secret}@127.0.0.1:1/0"

    result = CliRunner().invoke(
        cli, ["gate", "show", "customs"], env={**CLEAN_ENV, "TIDEGATE_REDIS_URL": url}
    )

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert "--redis-url" in result.output
    for piece in ("s3cr", "et", "12"):
        if piece in secret:
            assert piece not in result.output.replace("--redis-url", "").replace("Redis", "")


def test_password_in_the_url_is_never_printed() -> None:
    """An unreachable Redis with credentials: the error names the problem, not the secret."""
    result = CliRunner().invoke(
        cli,
        ["gate", "show", "customs"],
        env={**CLEAN_ENV, "TIDEGATE_REDIS_URL": "redis://ops:s3cret-pw@127.0.0.1:1/0"},
    )

    assert result.exit_code != 0
    assert "s3cret-pw" not in result.output
    help_text = CliRunner().invoke(
        cli, ["gate", "show", "--help"], env={"TIDEGATE_REDIS_URL": "redis://ops:s3cret-pw@h:1/0"}
    )
    assert "s3cret-pw" not in help_text.output
