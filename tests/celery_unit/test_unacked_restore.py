"""A message in kombu's ``unacked`` hash comes back within the visibility timeout plus
the preset's restore-lock expiry, even when the worker that held kombu's restore lock
was SIGKILLed while holding it (kombu leaves such a lock for 300 s by default; a
full-size chaos run saw a message wait 353 s, visibility timeout 60 s).

Real Redis, a real process that fetches the message and takes the lock with kombu's own
code and is then SIGKILLed, and kombu's own ``restore_visible`` called as a surviving
worker's event loop calls it. kombu's keys get a per-test ``global_keyprefix``, so the
session's other tests and their ``unacked`` hash are not touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.integrations.celery.preset import UNACKED_MUTEX_EXPIRE_S

VISIBILITY_S = 4.0
#: Preset with time limits that allow the short visibility timeout (2 x hard limit).
PRESET = CeleryPreset(soft_time_limit_s=1.0, hard_time_limit_s=2.0)

#: Fetches one message (kombu writes it to ``unacked``), takes kombu's restore lock
#: as ``restore_visible`` does, says so, and waits to be killed.
HOLDER = """
import sys, time
from celery import Celery
from kombu.transport.redis import Mutex
from tidegate.integrations.celery import CeleryPreset, configure

url, prefix, queue = sys.argv[1:4]
app = Celery("holder", broker=url, set_as_current=False)
app.conf.broker_transport_options = {"visibility_timeout": 4.0, "global_keyprefix": prefix}
configure(app, CeleryPreset(soft_time_limit_s=1.0, hard_time_limit_s=2.0))
with app.connection() as conn:
    channel = conn.default_channel
    message = channel.basic_get(queue, no_ack=False)
    assert message is not None, "nothing to fetch"
    with Mutex(channel.client, channel.unacked_mutex_key, channel.unacked_mutex_expire):
        print("holding", flush=True)
        time.sleep(600)
"""


def _app(url: str, prefix: str) -> Celery:
    app = Celery("restorer", broker=url, set_as_current=False)
    app.conf.broker_transport_options = {
        "visibility_timeout": VISIBILITY_S,
        "global_keyprefix": prefix,
    }
    return configure(app, PRESET)


@pytest.fixture
def ctx(redis_url: str, redis_client: redis.Redis, prefix: str) -> Iterator[dict[str, Any]]:
    kombu_prefix = f"{prefix}-kombu:"
    app = _app(redis_url, kombu_prefix)
    try:
        yield {"app": app, "kombu_prefix": kombu_prefix, "queue": f"{prefix}-q"}
    finally:
        app.close()
        keys = list(redis_client.scan_iter(match=f"{kombu_prefix}*", count=1000))
        if keys:
            redis_client.delete(*keys)


def test_preset_bounds_the_restore_lock() -> None:
    app = configure(Celery(broker="redis://127.0.0.1:1/0", set_as_current=False))
    assert app.conf.broker_transport_options["unacked_mutex_expire"] == UNACKED_MUTEX_EXPIRE_S
    own = Celery(broker="redis://127.0.0.1:1/0", set_as_current=False)
    own.conf.broker_transport_options = {"unacked_mutex_expire": 7}
    assert configure(own).conf.broker_transport_options["unacked_mutex_expire"] == 7
    amqp = configure(Celery(broker="amqp://guest@127.0.0.1:1//", set_as_current=False))
    assert "unacked_mutex_expire" not in amqp.conf.broker_transport_options


def test_killed_lock_holder_does_not_hold_back_redelivery(
    ctx: dict[str, Any], redis_url: str, redis_client: redis.Redis
) -> None:
    app, queue, kprefix = ctx["app"], ctx["queue"], ctx["kombu_prefix"]
    app.send_task("unit.restore.push", args=[{"key": "K1"}], queue=queue)
    assert redis_client.llen(f"{kprefix}{queue}") == 1

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, redis_url, kprefix, queue],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    killed_at = time.monotonic()
    assert redis_client.llen(f"{kprefix}{queue}") == 0
    assert redis_client.hlen(f"{kprefix}unacked") == 1
    # The dead holder's lock is still there; it must not outlive the preset's bound.
    lock_ttl_s = redis_client.pttl(f"{kprefix}unacked_mutex") / 1000
    assert 0 < lock_ttl_s <= UNACKED_MUTEX_EXPIRE_S

    # A surviving worker's event loop calls restore_visible every restore interval.
    bound_s = max(VISIBILITY_S, UNACKED_MUTEX_EXPIRE_S) + 5.0
    with app.connection() as conn:
        channel = conn.default_channel
        while redis_client.llen(f"{kprefix}{queue}") == 0:
            assert time.monotonic() - killed_at < bound_s, (
                f"the message is still in unacked {bound_s:g} s after its holder died "
                f"(lock ttl {redis_client.pttl(f'{kprefix}unacked_mutex')} ms)"
            )
            channel.qos.restore_visible(num=channel.unacked_restore_limit, interval=1)
            time.sleep(0.2)
    assert redis_client.hlen(f"{kprefix}unacked") == 0
