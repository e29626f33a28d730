"""The unit the behaviour suite delivers, as a Celery task and as an RQ job.

Real worker processes import this module (its directory is on their PYTHONPATH);
configuration comes from their environment, as in production: ``TIDEGATE_REDIS_URL``,
``TIDEGATE_PREFIX``, ``TIDEGATE_CUSTOMS_URL``, ``LIFECYCLE_QUEUE`` (the test's queue)
and, for the Celery engine on RabbitMQ, ``TIDEGATE_BROKER_URL`` (the test's vhost).
Both bodies are the same call; everything around them is the one lifecycle.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from celery import Celery

from tidegate.delivery import RetryPolicy
from tidegate.downstream import DownstreamClient, PauseFeedback
from tidegate.integrations.celery import CeleryPreset, GatedTask, configure
from tidegate.integrations.celery.amqp_topology import is_amqp_url
from tidegate.integrations.celery.runtime import runtime
from tidegate.integrations.rq import gate, gated

#: Two attempts, then the horizon decides: ten minutes of failing before a dead letter.
POLICY = RetryPolicy(max_attempts=2, min_horizon_s=600, backoff_base_s=0.5, backoff_cap_s=1)
#: The envelope fields a unit must have (else it is malformed).
REQUIRED = ("key", "body")
MAX_WAIT_S = 0.3
LOOKUP = "/declarations"


def send(envelope: Mapping[str, Any], feedback: PauseFeedback) -> dict[str, Any]:
    """Lodge one document with the customs sim: the unit's one downstream call."""
    client = DownstreamClient("customs", os.environ["TIDEGATE_CUSTOMS_URL"], feedback=feedback)
    try:
        return client.send(LOOKUP, dict(envelope), idempotency_key=str(envelope["key"]))
    finally:
        client.close()


def celery_app() -> Celery:
    """A Celery app with the safe preset and one queue, on the Redis broker unless
    ``TIDEGATE_BROKER_URL`` names another (RabbitMQ); results stay on Redis."""
    queue = os.environ.get("LIFECYCLE_QUEUE", "lifecycle")
    url = os.environ.get("TIDEGATE_REDIS_URL", "redis://127.0.0.1:6379/0")
    broker = os.environ.get("TIDEGATE_BROKER_URL") or url
    app = Celery("lifecycle", broker=broker, backend=url, set_as_current=False)
    if not is_amqp_url(broker):
        # A killed worker's message comes back 10 s after its delivery (the hard limit
        # is 5 s), found by a sweep of the unacked messages every second. RabbitMQ
        # needs neither: it requeues a delivery when its consumer's connection closes.
        app.conf.broker_transport_options = {
            "visibility_timeout": 10,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
    preset = CeleryPreset(
        soft_time_limit_s=4,
        hard_time_limit_s=5,
        queues=(queue,),
        routes={"lifecycle.*": queue},
    )
    return configure(app, preset)


app = celery_app()


@app.task(
    base=GatedTask,
    name="lifecycle.lodge",
    downstream="customs",
    lookup_path=LOOKUP,
    required_fields=REQUIRED,
    retry_policy=POLICY,
    max_wait_s=MAX_WAIT_S,
)
def celery_lodge(envelope: dict[str, Any]) -> dict[str, Any]:
    return send(envelope, runtime(app).gate("customs"))


@gated(
    "customs",
    max_wait_s=MAX_WAIT_S,
    retry_policy=POLICY,
    lookup_path=LOOKUP,
    required_fields=REQUIRED,
)
def rq_lodge(envelope: dict[str, Any]) -> dict[str, Any]:
    return send(envelope, gate("customs"))
