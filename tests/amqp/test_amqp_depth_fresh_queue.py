"""The depth probe on a quorum queue the management API has no figures for yet.

For the first seconds of a quorum queue's life (until its metrics are first emitted)
``GET /api/queues/<vhost>/<queue>?columns=messages_unacknowledged`` answers ``[]``, not
an object: the column filter found nothing. That is "nothing counted yet", not a broken
API — it must not switch the unacked figures of *every* queue in the sample off.
"""

from __future__ import annotations

import structlog
from kombu import Connection, Queue

from tidegate.integrations.celery.amqp_topology import AmqpTopology
from tidegate.integrations.celery.depth import AmqpDepthProbe


def test_a_fresh_quorum_queue_reads_as_zero_without_a_warning(
    rabbitmq_url: str, rabbitmq_management_url: str, prefix: str
) -> None:
    fresh = Queue(
        f"{prefix}.fresh",
        routing_key=f"{prefix}.fresh",
        durable=True,
        queue_arguments={"x-queue-type": "quorum"},
    )
    assert AmqpTopology().quorum  # the preset's queues are quorum queues like this one
    with Connection(rabbitmq_url, transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        fresh(channel).declare()
        try:
            probe = AmqpDepthProbe(conn, management_url=rabbitmq_management_url)
            with structlog.testing.capture_logs() as events:
                depth = probe.sample([fresh.name])[fresh.name]
                unacked = probe._unacked([fresh.name])
        finally:
            fresh(channel).delete()
    assert [e for e in events if e["event"] == "amqp_unacked_unavailable"] == []
    assert (depth.ready, depth.unacked) == (0, 0)
    # Counted as a queue with 0 unacked, not left out as "no answer".
    assert unacked == {fresh.name: 0}
