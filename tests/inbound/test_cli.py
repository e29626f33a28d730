"""The CLI groups of the inbound controls, through click's CliRunner."""

from __future__ import annotations

import io
import json

import click
import pytest
import redis
from celery import Celery
from click.testing import CliRunner

from tidegate.cli.monitor import metrics, monitor, watermarks
from tidegate.cli.quarantine import quarantine
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.logging import configure

pytestmark = pytest.mark.redis


def invoke(command: click.Command, args: list[str], redis_url: str) -> tuple[int, str]:
    """Run a command; JSON log lines go to a buffer (the group configures them in real use)."""
    configure(level="INFO", stream=io.StringIO())
    result = CliRunner().invoke(command, [*args, "--redis-url", redis_url])
    return result.exit_code, result.output


def test_watermarks_set_show_and_refuse_invalid_values(redis_url: str, prefix: str) -> None:
    """set validates against the effective values; show reports defaults and overrides."""
    code, out = invoke(
        watermarks, ["set", "--prefix", prefix, "--hwm", "400", "--lwm", "40"], redis_url
    )
    assert code == 0, out
    code, out = invoke(watermarks, ["set", "--prefix", prefix, "--lwm", "400"], redis_url)
    assert code == 2
    assert "--lwm=400 --hwm=400" in out
    assert "QUEUE_" not in out
    code, out = invoke(watermarks, ["show", "--prefix", prefix, "--json"], redis_url)
    shown = json.loads(out)
    assert (shown["hwm"], shown["lwm"]) == (400, 40)
    assert shown["overrides"] == {"hwm": 400.0, "lwm": 40.0}
    code, out = invoke(watermarks, ["reset", "--prefix", prefix, "--json"], redis_url)
    assert code == 0
    assert json.loads(out)["hwm"] == shown["defaults"]["hwm"]


def test_watermarks_show_is_a_table_saying_where_each_value_comes_from(
    redis_url: str, prefix: str
) -> None:
    """The default output is a table for a human: value and source per field, no JSON."""
    invoke(watermarks, ["set", "--prefix", prefix, "--hwm", "400"], redis_url)
    invoke(watermarks, ["set", "--prefix", prefix, "--queue", "edi.tos", "--lwm", "7"], redis_url)

    code, out = invoke(watermarks, ["show", "--prefix", prefix, "--queue", "edi.tos"], redis_url)

    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert code == 0, out
    assert "{" not in out
    assert rows["hwm"].split()[1:] == ["400", "live", "(set", "by", "watermarks", "set)"]
    assert rows["lwm"].split()[1:3] == ["7", "live"]
    assert "for edi.tos" in rows["lwm"]
    assert rows["shed_after"].split()[-1] == "default"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--hwm", "0"], "--hwm"),
        (["--lwm", "-1"], "--lwm"),
        (["--shed-after", "0"], "--shed-after"),
    ],
)
def test_watermarks_set_errors_name_the_flag(
    redis_url: str, prefix: str, args: list[str], flag: str
) -> None:
    """A value out of range is a usage error naming the flag, never an environment variable."""
    code, out = invoke(watermarks, ["set", "--prefix", prefix, *args], redis_url)

    assert code == 2
    assert flag in out
    assert "TIDEGATE_" not in out
    assert "QUEUE_" not in out


def test_monitor_samples_and_prints_the_states(
    producer: Celery, redis_url: str, prefix: str, queues: dict[str, str]
) -> None:
    """Two ticks over a queue above HWM: scale_out, published, printed."""
    bulk = queues["bulk"]
    for _ in range(30):
        producer.send_task("filler", args=[{}], queue=bulk)
    invoke(watermarks, ["set", "--prefix", prefix, "--hwm", "20", "--lwm", "5"], redis_url)
    code, out = invoke(
        monitor,
        ["--prefix", prefix, "--queue", bulk, "--interval", "0.05", "--iterations", "2"],
        redis_url,
    )
    assert code == 0, out
    state = json.loads(out[out.index("{") :])[bulk]
    assert (state["depth"], state["signal"], state["over_hwm_intervals"]) == (30, "scale_out", 2)


def test_quarantine_ls_replay_and_purge(
    redis_client: redis.Redis, redis_url: str, prefix: str, queues: dict[str, str]
) -> None:
    """ls never prints payloads; replay is bounded by --limit; purge needs --yes."""
    bulk = queues["bulk"]
    store = Quarantine(redis_client, prefix=prefix)
    for n in range(5):
        store.add(
            QuarantinedDocument(
                f"k{n}", "BULK_BL_PDF", bulk, "bulk.documents.store", {"secret_body": "x"}
            )
        )
    code, out = invoke(quarantine, ["ls", "--prefix", prefix, "--limit", "2"], redis_url)
    assert code == 0, out
    assert "{" not in out
    assert "secret_body" not in out
    assert [row[:3] for row in map(str.split, out.splitlines()) if row[:1] in (["k0"], ["k1"])] == [
        ["k0", "BULK_BL_PDF", bulk],
        ["k1", "BULK_BL_PDF", bulk],
    ]
    code, out = invoke(quarantine, ["ls", "--prefix", prefix, "--limit", "2", "--json"], redis_url)
    assert code == 0, out
    listed = json.loads(out)
    assert listed["documents"] == 5
    assert [d["key"] for d in listed["documents_listed"]] == ["k0", "k1"]
    assert "secret_body" not in out

    code, out = invoke(quarantine, ["replay", "--prefix", prefix, "--limit", "3"], redis_url)
    assert code == 0, out
    assert json.loads(out)["replayed"] == 3
    assert redis_client.llen(bulk) == 3

    code, out = invoke(quarantine, ["purge", "--prefix", prefix], redis_url)
    assert code == 1
    assert "--yes" in out
    assert len(store) == 2
    code, out = invoke(quarantine, ["purge", "--prefix", prefix, "--yes", "--json"], redis_url)
    assert json.loads(out) == {"purged": 2}


def test_metrics_once_prints_the_exposition(redis_url: str, prefix: str) -> None:
    """``tidegate metrics --once`` prints what /metrics would serve."""
    code, out = invoke(metrics, ["--prefix", prefix, "--once"], redis_url)
    assert code == 0, out
    assert "# TYPE tidegate_dlq_depth gauge" in out
    assert "tidegate_quarantine_oldest_age_seconds 0.0" in out
