"""``redis-oom``: Redis refuses every write for a while mid-burst (issue #13, item 3).

A trimmed run of the scenario with real worker processes on the scenario's own Redis:
the workers wait through the refusal and resume; nothing is lost, accepted twice or
dead-lettered, and no worker main process exits.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tidegate.harness.chaos import KINDS, preset, run_chaos

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]


def test_redis_oom_is_a_chaos_kind_the_cli_offers() -> None:
    from tidegate.cli import cli

    assert "redis-oom" in KINDS
    result = CliRunner().invoke(cli, ["demo", "--help"])
    assert "redis-oom" in result.output


def test_redis_oom(redis_binary: str) -> None:
    report, _ = run_chaos(preset("redis-oom", "test"))
    chaos = report["chaos"]
    checks = {c["name"]: c for c in chaos["checks"]}

    assert [name for name, c in checks.items() if not c["ok"]] == []
    assert report["lost"] == 0
    assert report["pending"] == 0
    assert report["duplicates"] == 0
    assert report["dead_lettered"] == 0
    assert chaos["probe_writes_refused"] >= 1
    assert chaos["probe_writes_accepted"] == 0
    assert chaos["full_s"] >= 8.0
    assert chaos["worker_mains_after"] == chaos["worker_mains_before"]
