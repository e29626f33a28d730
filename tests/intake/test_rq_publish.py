"""``tidegate intake serve --engine rq``: units become RQ jobs, acknowledged after enqueue."""

from __future__ import annotations

import httpx
import pytest
import redis
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.cli.intake import DEFAULT_TASKS
from tidegate.integrations.rq import json_queue

pytestmark = [pytest.mark.redis, pytest.mark.slow]

JOBS = {queue: f"portjobs.{queue.replace('.', '_')}" for queue in DEFAULT_TASKS}


def test_without_a_job_function_for_every_queue_rq_is_refused() -> None:
    """RQ runs the user's functions: no Celery task name is guessed for it."""
    args = ["--allow-anonymous", "--engine", "rq", "--task", "edi.customs=portjobs.customs"]
    result = CliRunner().invoke(cli, ["intake", "serve", "--port", "8099", *args])
    assert result.exit_code == 2
    assert "missing: bulk.dispatch, edi.tos, edi.unrouted" in result.output


def test_an_interchange_becomes_rq_jobs_before_the_ack_and_its_repeat_none(
    own_redis: str, intake_server, build
) -> None:
    """202 once the job is in RQ's queue (JSON, the configured function, the unit's
    envelope with its idempotency key); the repeat is 409 and enqueues nothing."""
    args = [arg for queue, job in JOBS.items() for arg in ("--task", f"{queue}={job}")]
    served = intake_server(own_redis, "--engine", "rq", *args)
    body = build.interchange(build.vermas())
    first = httpx.post(f"{served.url}/interchanges", content=body, timeout=30)
    assert first.status_code == 202
    connection = redis.Redis.from_url(own_redis)
    queue = json_queue("edi.customs", connection)
    (job,) = queue.get_jobs()
    assert job.func_name == JOBS["edi.customs"]
    envelope = job.args[0]
    assert envelope["type"] == "VERMAS"
    assert len(envelope["key"]) == 64

    repeat = httpx.post(f"{served.url}/interchanges", content=body, timeout=30)
    assert repeat.status_code == 409
    assert queue.count == 1
    connection.close()
