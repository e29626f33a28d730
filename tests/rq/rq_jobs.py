"""Job functions the RQ worker processes import (this directory is on their PYTHONPATH).

Configuration comes from the worker's environment, as in production:
``TIDEGATE_REDIS_URL``, ``TIDEGATE_PREFIX``, ``TIDEGATE_CUSTOMS_URL``,
``TIDEGATE_MAX_WAIT_S``.
"""

from __future__ import annotations

import os
from typing import Any

from tidegate.downstream import DownstreamClient
from tidegate.errors import DownstreamRejected
from tidegate.integrations.rq import gate, gated

MAX_WAIT_S = float(os.environ.get("TIDEGATE_MAX_WAIT_S", "5"))


@gated("customs", max_wait_s=MAX_WAIT_S, lookup_path="/declarations")
def lodge(envelope: dict[str, Any]) -> dict[str, Any]:
    """Lodge one document with the customs sim, through the fleet-wide gate."""
    client = DownstreamClient(
        "customs", os.environ["TIDEGATE_CUSTOMS_URL"], feedback=gate("customs")
    )
    try:
        return client.send("/declarations", envelope, idempotency_key=str(envelope["key"]))
    finally:
        client.close()


@gated("customs", max_wait_s=MAX_WAIT_S)
def refused(envelope: dict[str, Any]) -> dict[str, Any]:
    """The downstream refuses the document itself: dead-lettered at once."""
    raise DownstreamRejected("customs", "invalid verified gross mass", status=422)


def explode(envelope: dict[str, Any]) -> None:
    """A bug: not gated, just fails."""
    raise ValueError("boom")
