"""One depth probe shared by many request threads, as the front door shares it.

A py-amqp connection is not thread-safe: before the probe serialised its use, two
threads opening channels at once interleaved their frames ("Received frame_end 0x01
while expecting 0xce") and the next thread waited forever for an answer — the front
door stopped acknowledging senders in the middle of a burst (seen on CI).
"""

from __future__ import annotations

import threading
import time

from kombu import Connection, Queue

from tidegate.integrations.celery.depth import AmqpDepthProbe

THREADS = 8
SAMPLES_PER_THREAD = 40


def test_concurrent_samples_on_one_probe_all_answer_correctly(
    rabbitmq_url: str, rabbitmq_management_url: str, prefix: str
) -> None:
    queues = [Queue(f"{prefix}.threads.{i}", routing_key=f"{prefix}.threads.{i}") for i in range(3)]
    with Connection(rabbitmq_url, transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        producer = conn.Producer(channel)
        for count, queue in enumerate(queues, start=1):
            queue(channel).declare()
            for _ in range(count):
                producer.publish({"n": count}, routing_key=queue.routing_key, serializer="json")
        names = [queue.name for queue in queues]
        probe = AmqpDepthProbe(rabbitmq_url, management_url=rabbitmq_management_url)
        start = threading.Barrier(THREADS)
        answers: list[list[tuple[int, ...]]] = []

        def hammer() -> None:
            start.wait(timeout=30)
            readings = [
                tuple(probe.sample(names)[name].ready for name in names)
                for _ in range(SAMPLES_PER_THREAD)
            ]
            answers.append(readings)

        # Daemon threads, joined with a bound: a hang is the failure this guards
        # against, and it must fail the test rather than hold the suite.
        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(THREADS)]
        try:
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 60
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            if not any(thread.is_alive() for thread in threads):
                probe.close()
            for queue in queues:
                queue(channel).delete()
    assert not any(thread.is_alive() for thread in threads), "a sampling thread hung"
    assert len(answers) == THREADS
    every = {reading for thread in answers for reading in thread}
    assert every == {(1, 2, 3)}
    assert sum(len(thread) for thread in answers) == THREADS * SAMPLES_PER_THREAD
