"""Chaos scenarios own their Redis: each run starts (and kills) an embedded server.

They never use ``REDIS_URL`` or the session server — a scenario SIGKILLs Redis or
floods ``unacked`` — so they need a ``redis-server`` binary; without one they skip
locally and fail under ``CI=true``, like every Redis test.
"""

from __future__ import annotations

import os

import pytest

from tidegate.errors import ConfigurationError
from tidegate.redis_server import find_redis_server

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """The ``redis-server`` the scenarios start, restart and kill."""
    try:
        return find_redis_server()
    except ConfigurationError as exc:
        if CI:
            raise
        pytest.skip(f"no redis-server binary: {exc}")
