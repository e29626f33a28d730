"""The Celery app of the vessel-burst demo and of the integration tests.

Run by real workers, one pool per downstream::

    celery -A tidegate.harness.vessel_app worker -Q edi.customs -c 2 -n customs@%h
    celery -A tidegate.harness.vessel_app worker -Q edi.tos -c 4 -n tos@%h
    celery -A tidegate.harness.vessel_app worker -Q bulk.dispatch,bl.parse -c 2 -n bulk@%h

Configuration comes from the environment, so the demo, the tests and a user's shell
all start workers the same way:

- ``TIDEGATE_REDIS_URL`` — gate state, parking and DLQ, and the broker unless…
- ``TIDEGATE_BROKER_URL`` — …a separate broker is named (``amqp://`` for RabbitMQ);
- ``TIDEGATE_CUSTOMS_URL`` / ``TIDEGATE_TOS_URL`` — the downstreams' base URLs;
- ``TIDEGATE_CUSTOMS_RATE`` / ``_BURST``, ``TIDEGATE_TOS_CONCURRENCY`` … — gate defaults;
- ``TIDEGATE_MAX_WAIT_S`` — longest wait in place before a message is parked;
- ``TIDEGATE_VISIBILITY_TIMEOUT_S`` — the Redis broker's visibility timeout (checked
  against the hard time limit: a worker with a too-short one refuses to start).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from celery import Celery, signals

from tidegate.bulk.celery import install_bulk
from tidegate.integrations.celery import GatedTask, setup
from tidegate.integrations.celery.runtime import runtime
from tidegate.keys import DEFAULT_PREFIX
from tidegate.logging import configure as configure_logging
from tidegate.ops.metrics import install_event_counters

__all__ = ["app", "bulk", "push_tos", "submit_customs"]

_REDIS = os.environ.get("TIDEGATE_REDIS_URL") or os.environ.get(
    "REDIS_URL", "redis://127.0.0.1:6379/0"
)

_BROKER = os.environ.get("TIDEGATE_BROKER_URL") or _REDIS

app = Celery("tidegate-vessel", broker=_BROKER, backend=_REDIS)
app.conf.tidegate_redis_url = _REDIS
app.conf.tidegate_prefix = os.environ.get("TIDEGATE_PREFIX", DEFAULT_PREFIX)
app.conf.task_ignore_result = True
app.conf.worker_hijack_root_logger = False
if "TIDEGATE_VISIBILITY_TIMEOUT_S" in os.environ:
    app.conf.broker_transport_options = {
        "visibility_timeout": float(os.environ["TIDEGATE_VISIBILITY_TIMEOUT_S"])
    }
setup(app)

_PATHS = {"customs": "/declarations", "tos": "/container-reports"}


def _deliver(name: str, envelope: Mapping[str, Any]) -> dict[str, Any]:
    body = {"type": envelope["type"], "class": envelope["class"], "edifact": envelope["body"]}
    answer = (
        runtime(app).downstream(name).send(_PATHS[name], body, idempotency_key=str(envelope["key"]))
    )
    return {"tidegate": "delivered", "downstream": name, "status": answer.get("status")}


_MAX_WAIT_S = float(os.environ.get("TIDEGATE_MAX_WAIT_S", "10"))
#: What ``_deliver`` reads from an envelope: a unit without one is dead-lettered.
_ENVELOPE_FIELDS = ("key", "type", "class", "body")


@app.task(
    base=GatedTask,
    name="edi.customs.submit",
    downstream="customs",
    max_wait_s=_MAX_WAIT_S,
    lookup_path=_PATHS["customs"],
    required_fields=_ENVELOPE_FIELDS,
)
def submit_customs(envelope: dict[str, Any]) -> dict[str, Any]:
    """Lodge one customs-bound document (VERMAS, CUSCAR) with the single window."""
    return _deliver("customs", envelope)


@app.task(
    base=GatedTask,
    name="edi.tos.push",
    downstream="tos",
    max_wait_s=_MAX_WAIT_S,
    lookup_path=_PATHS["tos"],
    required_fields=_ENVELOPE_FIELDS,
)
def push_tos(envelope: dict[str, Any]) -> dict[str, Any]:
    """Push one terminal message (COARRI, CODECO) to the TOS."""
    return _deliver("tos", envelope)


def _forward_bl(envelope: Mapping[str, Any]) -> dict[str, Any]:
    body = {
        "type": "BL",
        "bl_number": envelope["bl_number"],
        "batch_id": envelope["batch_id"],
        "containers": envelope["containers"],
    }
    runtime(app).downstream("tos").send(_PATHS["tos"], body, idempotency_key=str(envelope["key"]))
    return {"tidegate": "delivered", "downstream": "tos", "bl_number": envelope["bl_number"]}


bulk = install_bulk(app, forward=_forward_bl, lookup_path=_PATHS["tos"])


@signals.celeryd_init.connect
def _logging(**_: Any) -> None:
    """JSON decision events from every worker process (the pool forks after this),
    counted fleet-wide in Redis for ``tidegate metrics``."""
    level = os.environ.get("TIDEGATE_LOG_LEVEL", "INFO")
    configure_logging(level=level)
    install_event_counters(_REDIS, prefix=app.conf.tidegate_prefix, level=level)
