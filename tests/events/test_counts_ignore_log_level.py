"""A log level can never change a metric (issue #12, item 8).

The fleet-wide counters used to be a structlog processor, and structlog's filtering
logger drops a below-level call before any processor runs: at ``ERROR`` a throttle
(``INFO``) and a pause (``WARNING``) were never counted. The counters now subscribe to
the typed decision events, which are emitted whatever the log shows.
"""

from __future__ import annotations

import io

import pytest
import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidegate.flow import Gate
from tidegate.logging import configure
from tidegate.ops.metrics import install_event_counters, registry_for

pytestmark = pytest.mark.redis


def _samples(
    client: redis.Redis, prefix: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry_for(client, prefix=prefix)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_at_level_error_a_throttle_and_a_pause_are_still_counted(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Logs at ERROR show neither decision; Redis and the scrape count both."""
    stream = io.StringIO()
    configure(level="ERROR", stream=stream)
    counters = install_event_counters(redis_client, prefix=prefix)

    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=0.001, burst=1)
    assert gate.try_acquire().allowed
    assert not gate.try_acquire().allowed  # an INFO throttle, mode "try"
    gate.pause(5.0, "http_429")  # a WARNING pause

    assert stream.getvalue() == ""  # the log level did filter both lines
    assert counters.dropped == 0
    fields = {k.decode(): v.decode() for k, v in redis_client.hgetall(counters.key).items()}
    assert fields == {"throttles|customs|rate|try": "1", "pauses|customs|http_429": "1"}
    samples = _samples(redis_client, prefix)
    throttles = (
        "tidegate_gate_throttles_total",
        (("downstream", "customs"), ("mode", "try"), ("reason", "rate")),
    )
    pauses = ("tidegate_gate_pauses_total", (("downstream", "customs"), ("reason", "http_429")))
    assert samples[throttles] == 1
    assert samples[pauses] == 1
