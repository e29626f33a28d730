"""The operator console: the fleet's live state in a browser, and audited actions.

``tidegate console`` serves it. Each live view is read in one pipelined round trip
(:mod:`~tidegate.console.reads`; :mod:`~tidegate.console.memory` is its twin for
tests without Redis) and turned into rows by pure functions
(:mod:`~tidegate.console.model`); the charts' points are sampled by one console at a
time (:mod:`~tidegate.console.sampler`) and drawn as SVG
(:mod:`~tidegate.console.charts`). Actions go through the fleet's own APIs
(:mod:`~tidegate.console.actions`) after sign-in (:mod:`~tidegate.console.access`),
a CSRF check (:mod:`~tidegate.console.csrf`) and a confirmation page.

Needs the ``console`` extra (``pip install tidegate[console]``).
"""

from __future__ import annotations

from tidegate.console.access import ANONYMOUS_VIEWER, Role, User, Users, hash_secret
from tidegate.console.actions import Actions, Outcome
from tidegate.console.app import DEFAULT_REFRESH_S, ConsoleConfig, create_app
from tidegate.console.errors import (
    BadAction,
    ConsoleError,
    CsrfRefused,
    Forbidden,
    Unauthenticated,
)
from tidegate.console.memory import MemoryReads
from tidegate.console.reads import ConsoleReads, RedisReads
from tidegate.console.sampler import HistorySampler

__all__ = [
    "ANONYMOUS_VIEWER",
    "DEFAULT_REFRESH_S",
    "Actions",
    "BadAction",
    "ConsoleConfig",
    "ConsoleError",
    "ConsoleReads",
    "CsrfRefused",
    "Forbidden",
    "HistorySampler",
    "MemoryReads",
    "Outcome",
    "RedisReads",
    "Role",
    "Unauthenticated",
    "User",
    "Users",
    "create_app",
    "hash_secret",
]
