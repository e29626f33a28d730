"""The RQ jobs of the vessel-burst demo: the same two units as the Celery vessel app.

Run by real ``rq worker`` processes of tidegate's ``JsonWorker`` (see
:mod:`tidegate.harness.rq_fleet`); configuration comes from the environment, as for the
Celery workers: ``TIDEGATE_REDIS_URL``, ``TIDEGATE_PREFIX``, ``TIDEGATE_CUSTOMS_URL`` /
``TIDEGATE_TOS_URL``, the gate defaults and ``TIDEGATE_MAX_WAIT_S``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tidegate.integrations.rq import downstream_client, gated

__all__ = ["push_tos", "submit_customs"]

_PATHS = {"customs": "/declarations", "tos": "/container-reports"}
_MAX_WAIT_S = float(os.environ.get("TIDEGATE_MAX_WAIT_S", "10"))
#: What ``_deliver`` reads from an envelope: a unit without one is dead-lettered.
_ENVELOPE_FIELDS = ("key", "type", "class", "body")


def _deliver(name: str, envelope: Mapping[str, Any]) -> dict[str, Any]:
    body = {"type": envelope["type"], "class": envelope["class"], "edifact": envelope["body"]}
    answer = downstream_client(name).send(_PATHS[name], body, idempotency_key=str(envelope["key"]))
    return {"tidegate": "delivered", "downstream": name, "status": answer.get("status")}


@gated(
    "customs",
    max_wait_s=_MAX_WAIT_S,
    lookup_path=_PATHS["customs"],
    required_fields=_ENVELOPE_FIELDS,
)
def submit_customs(envelope: dict[str, Any]) -> dict[str, Any]:
    """Lodge one customs-bound document (VERMAS, CUSCAR) with the single window."""
    return _deliver("customs", envelope)


@gated("tos", max_wait_s=_MAX_WAIT_S, lookup_path=_PATHS["tos"], required_fields=_ENVELOPE_FIELDS)
def push_tos(envelope: dict[str, Any]) -> dict[str, Any]:
    """Push one terminal message (COARRI, CODECO) to the TOS."""
    return _deliver("tos", envelope)
