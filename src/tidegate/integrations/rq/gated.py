"""An RQ job whose body is one downstream call, run through the unit lifecycle.

    @gated("customs", max_wait_s=10, lookup_path="/declarations", required_fields=("key",))
    def lodge(envelope):
        client = DownstreamClient("customs", CUSTOMS_URL, feedback=gate("customs"))
        return client.send("/declarations", envelope, idempotency_key=envelope["key"])

    queue.enqueue("myapp.jobs.lodge", envelope)

The job goes through :mod:`tidegate.delivery.lifecycle`, exactly as a Celery
``GatedTask`` does: a malformed unit is dead-lettered with the reason before the gate;
the delivery ledger skips a unit the downstream already accepted and, when an earlier
attempt may have landed (ledger ``sending``, a job RQ recovered from a dead worker,
earlier attempts, a DLQ replay), asks the downstream first (``lookup_path`` or
``confirm``); the gate (rate + lease + fleet pause) admits the call; a 429 is retried
in place a few times; a long wait or an unavailable downstream **re-schedules** the
job in RQ's scheduler (:class:`~tidegate.integrations.rq.engine.RqEngine`); a refusal,
or attempts exhausted past the horizon, **dead-letters** it with the reason, as an
``engine: rq`` letter that ``tidegate dlq replay`` enqueues back to its queue; Redis
unreachable → the exception propagates (RQ cannot do anything either).

Called outside an RQ job (a test, a script), the body runs through the gate only and
any failure is raised.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from rq.job import get_current_job

from tidegate.delivery import (
    LifecyclePolicy,
    RetryPolicy,
    Unit,
    deliver,
    max_request_s_for,
)
from tidegate.flow import Gate
from tidegate.integrations.rq._runtime import (
    client_for_job,
    downstream_client,
    gate_for,
    runtime_for,
    stores_for,
)
from tidegate.integrations.rq.engine import (
    ATTEMPT_META,
    FIRST_FAILED_META,
    REDELIVERED_META,
    REPLAY_META,
    RqEngine,
    rq_unit,
)

__all__ = [
    "ATTEMPT_META",
    "FIRST_FAILED_META",
    "REDELIVERED_META",
    "REPLAY_META",
    "gate",
    "gated",
]

P = ParamSpec("P")
R = TypeVar("R")


def gate(name: str) -> Gate:
    """The current process's gate of downstream ``name`` (for a client's feedback)."""
    return gate_for(name)


def _lookup(downstream: str, path: str) -> Callable[[str], bool | None]:
    def confirm(key: str) -> bool | None:
        return downstream_client(downstream).lookup(path, idempotency_key=key) is not None

    return confirm


def gated(
    downstream: str,
    *,
    max_wait_s: float = 10.0,
    retry_policy: RetryPolicy | None = None,
    skip_delivered: bool = True,
    lookup_path: str | None = None,
    confirm: Callable[[str], bool | None] | None = None,
    required_fields: Sequence[str] = (),
    check: Callable[[Unit], None] | None = None,
    max_request_s: float | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R | dict[str, Any]]]:
    """Run the decorated job through the unit lifecycle (see the module docstring).

    Args:
        downstream: the gate's name (shared with the Celery workers, if any).
        max_wait_s: the longest wait in place before the job is re-scheduled.
        retry_policy: attempts, horizon and backoff against an unavailable downstream.
        skip_delivered: consult the delivery ledger (skip, reconcile).
        lookup_path: the downstream's write path, when it answers ``GET <path>/<key>``
            (at ``TIDEGATE_<DOWNSTREAM>_URL``): how a doubtful unit is confirmed.
        confirm: instead of ``lookup_path``, ask the downstream yourself: ``True`` it
            accepted the key, ``False`` it did not, ``None`` it cannot say.
        required_fields: keys the envelope (the first argument) must have.
        check: a further malformed-unit check (raises ``MalformedUnit``).
        max_request_s: how long the downstream may take to finish a request it
            received; ``None`` reads ``TIDEGATE_<DOWNSTREAM>_MAX_REQUEST_S``.

    Returns:
        The decorator. A gated job returns the body's result, or a small dict
        ``{"tidegate": "parked" | "dead_lettered" | "already_delivered", ...}``.
    """
    policy = retry_policy or RetryPolicy()
    confirm = confirm or (_lookup(downstream, lookup_path) if lookup_path else None)

    def decorate(func: Callable[P, R]) -> Callable[P, R | dict[str, Any]]:
        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | dict[str, Any]:
            job = get_current_job()
            if job is None:
                with gate_for(downstream, client_for_job()).slot(max_wait=max_wait_s):
                    return func(*args, **kwargs)
            lifecycle_policy = LifecyclePolicy(
                max_wait_s=max_wait_s,
                retry=policy,
                skip_delivered=skip_delivered,
                max_request_s=max_request_s_for(
                    max_request_s,
                    f"{func.__name__} max_request_s",
                    runtime_for(client_for_job(job.connection))
                    .settings_of(downstream)
                    .max_request_s,
                ),
            )
            engine = RqEngine(
                job, func, required_fields=required_fields, check=check, confirm=confirm
            )
            result: R | dict[str, Any] = deliver(
                engine,
                rq_unit(job, downstream, args, kwargs),
                stores_for(downstream, client_for_job(job.connection)),
                lifecycle_policy,
            )
            return result

        wrapper.tidegate_downstream = downstream  # type: ignore[attr-defined]
        return wrapper

    return decorate
