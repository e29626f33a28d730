"""The Celery app of the chaos runs' workers: the vessel app with shorter time limits.

``celery -A tidegate.harness.chaos.worker_app:worker_app`` (the ``-A`` in
:data:`~tidegate.harness.chaos.config.WORKER_APP`) runs the vessel app
(:mod:`tidegate.harness.vessel_app`) with its time limits and the broker's visibility
timeout taken from ``TIDEGATE_CHAOS_*`` (see
:class:`~tidegate.harness.chaos.config.WorkerTiming`): the vessel app's own are the
preset's (300 s hard), and its import-time check rightly refuses a visibility timeout
under 600 s. A module of its own, so that only a worker builds the app.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tidegate.errors import ConfigurationError
from tidegate.harness.chaos.config import _ENV_HARD, _ENV_RESTORE, _ENV_SOFT, _ENV_VISIBILITY

if TYPE_CHECKING:
    from celery import Celery


def _worker_app() -> Celery:
    """The vessel app with the chaos timing from the environment (idempotent)."""
    if "TIDEGATE_VISIBILITY_TIMEOUT_S" in os.environ:
        raise ConfigurationError(
            "the chaos workers set their own visibility timeout: unset "
            f"TIDEGATE_VISIBILITY_TIMEOUT_S and use {_ENV_VISIBILITY}"
        )
    from tidegate.harness import vessel_app
    from tidegate.integrations.celery import check_visibility_timeout

    app = vessel_app.app
    soft = float(os.environ.get(_ENV_SOFT, "25"))
    hard = float(os.environ.get(_ENV_HARD, "30"))
    restore = float(os.environ.get(_ENV_RESTORE, "1"))
    app.conf.task_soft_time_limit = soft
    app.conf.task_time_limit = hard
    app.conf.broker_transport_options = {
        **dict(app.conf.broker_transport_options or {}),
        "visibility_timeout": float(os.environ.get(_ENV_VISIBILITY, "60")),
        # kombu sweeps ``unacked`` every interval × throttle seconds (10 × 10 by
        # default): with a short visibility timeout the sweep must be short too.
        "unacked_restore_interval": restore,
        "unacked_restore_throttle": 1,
    }
    check_visibility_timeout(app)
    return app


def __getattr__(name: str) -> Celery:
    # ``celery -A …worker_app:worker_app`` looks the app up here; building it lazily keeps
    # the vessel app (and its Celery instance) out of every other process.
    if name == "worker_app":
        return _worker_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
