"""`tidegate demo` on a Redis too small for it ends with one clear line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidegate.redis_server import EmbeddedRedis

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]

#: Enough to start, far too little for a burst of a few hundred interchanges, bytes.
TOO_SMALL = 1_500_000


def test_demo_on_a_too_small_redis_fails_with_one_line() -> None:
    """The run stops at the first refused write with exit 1 and a single stderr line
    that says what is wrong and what to do (it was a kombu traceback)."""
    tidegate = Path(sys.executable).with_name("tidegate")
    with EmbeddedRedis(maxmemory=TOO_SMALL) as server:
        result = subprocess.run(
            [str(tidegate), "demo", "--scenario", "vessel", "--interchanges", "300"],
            env={**os.environ, "REDIS_URL": server.url},
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    # The run's decision events (JSON, e.g. the in-process intake's
    # ``intake_backend_unavailable``) share stderr by design; what a person reads is
    # every other line, and that must be one line, not a traceback.
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("{")]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: Redis is unavailable for writes: its memory is full")
    assert "maxmemory" in lines[0]
