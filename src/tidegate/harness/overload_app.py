"""The Celery app of the overload scenario: customs filings and the bulk document store.

Two lanes, one pool each, each behind its own fleet-wide gate::

    celery -A tidegate.harness.overload_app worker -Q edi.customs -c 2 -n customs@%h
    celery -A tidegate.harness.overload_app worker -Q bulk.documents -c 4 -n bulk@%h

- ``edi.customs.submit`` lodges a VERMAS (or CUSCAR) with the customs single window
  (gate ``customs``);
- ``bulk.documents.store`` writes a bulk document (a B/L PDF, an archive re-send) to
  the shared document store, a database that slows down with concurrent writers
  (gate ``docstore``: a rate and a concurrency cap).

Configuration comes from the environment, like :mod:`tidegate.harness.vessel_app`:
``TIDEGATE_REDIS_URL``, ``TIDEGATE_PREFIX``, ``TIDEGATE_CUSTOMS_URL``,
``TIDEGATE_DOCSTORE_URL``, the gate defaults (``TIDEGATE_CUSTOMS_RATE``,
``TIDEGATE_DOCSTORE_RATE``, ``TIDEGATE_DOCSTORE_CONCURRENCY`` …) and
``TIDEGATE_MAX_WAIT_S``. Each worker process also counts its gate and 429 decisions
into Redis (:func:`tidegate.ops.metrics.install_event_counters`) for ``/metrics``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from celery import Celery, signals

from tidegate.integrations.celery import CeleryPreset, GatedTask, setup
from tidegate.integrations.celery.runtime import runtime
from tidegate.keys import DEFAULT_PREFIX
from tidegate.load.shedding import BULK_QUEUE, CUSTOMS_QUEUE
from tidegate.logging import configure as configure_logging
from tidegate.ops.metrics import install_event_counters

__all__ = ["QUEUES", "TASKS", "app", "store_document", "submit_customs"]

#: queue → task: what the producer's admission sends where.
TASKS: Mapping[str, str] = {
    CUSTOMS_QUEUE: "edi.customs.submit",
    BULK_QUEUE: "bulk.documents.store",
}
QUEUES: tuple[str, ...] = tuple(TASKS)

_REDIS = os.environ.get("TIDEGATE_REDIS_URL") or os.environ.get(
    "REDIS_URL", "redis://127.0.0.1:6379/0"
)
_PREFIX = os.environ.get("TIDEGATE_PREFIX", DEFAULT_PREFIX)

app = Celery("tidegate-overload", broker=_REDIS)
app.conf.tidegate_redis_url = _REDIS
app.conf.tidegate_prefix = _PREFIX
app.conf.task_ignore_result = True
app.conf.worker_hijack_root_logger = False
setup(
    app,
    CeleryPreset(
        queues=QUEUES,
        routes={"edi.customs.*": CUSTOMS_QUEUE, "bulk.documents.*": BULK_QUEUE},
    ),
)

_PATHS = {"customs": "/declarations", "docstore": "/writes"}
_MAX_WAIT_S = float(os.environ.get("TIDEGATE_MAX_WAIT_S", "10"))


def _deliver(name: str, envelope: Mapping[str, Any]) -> dict[str, Any]:
    body = {"type": envelope["type"], "class": envelope["class"], "document": envelope["body"]}
    answer = (
        runtime(app).downstream(name).send(_PATHS[name], body, idempotency_key=str(envelope["key"]))
    )
    return {"tidegate": "delivered", "downstream": name, "status": answer.get("status")}


@app.task(base=GatedTask, name="edi.customs.submit", downstream="customs", max_wait_s=_MAX_WAIT_S)
def submit_customs(envelope: dict[str, Any]) -> dict[str, Any]:
    """Lodge one customs filing (VERMAS, CUSCAR) with the single window."""
    return _deliver("customs", envelope)


@app.task(
    base=GatedTask, name="bulk.documents.store", downstream="docstore", max_wait_s=_MAX_WAIT_S
)
def store_document(envelope: dict[str, Any]) -> dict[str, Any]:
    """Write one bulk document (B/L PDF, archive re-send) to the document store."""
    return _deliver("docstore", envelope)


@signals.celeryd_init.connect
def _logging(**_: Any) -> None:
    """JSON decision events, counted fleet-wide, from every worker process."""
    level = os.environ.get("TIDEGATE_LOG_LEVEL", "INFO")
    configure_logging(level=level)
    install_event_counters(_REDIS, prefix=_PREFIX, level=level)
