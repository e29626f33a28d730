"""A Celery task whose body is one downstream call, run through that downstream's gate.

    @app.task(base=GatedTask, downstream="customs", name="edi.customs.submit")
    def submit(envelope):
        return customs.send("/declarations", envelope["body"],
                            idempotency_key=envelope["key"])

Around the body: ``gate.slot()`` (rate + concurrency lease + fleet pause). A short wait
happens in place — the worker holds its one message while the backlog stays in the
broker. Anything else goes through :func:`tidegate.delivery.verdict_for`: a long wait
or a transient failure *parks* the message durably in Redis (never a Celery
``countdown``, whose ETA tasks sit in worker memory), an unrecoverable answer
dead-letters it with the reason, a 429 (the client has already paused the whole fleet)
is absorbed in place. In every case the message is acknowledged only once it is
delivered, parked or dead-lettered — so each unit ends in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from celery import Task
from celery.exceptions import Ignore, Reject, Retry

from tidegate.delivery import Action, RetryPolicy, Verdict, verdict_for
from tidegate.errors import ConfigurationError
from tidegate.integrations.celery.runtime import Runtime, runtime
from tidegate.load import DeadLetter
from tidegate.logging import get_logger

__all__ = ["ATTEMPT_HEADER", "REPLAY_HEADER", "GatedTask"]

log = get_logger("tidegate.celery")

#: Message header carrying the failed-attempt count across parking and republishing.
ATTEMPT_HEADER = "tidegate_attempt"
#: Message header set by a DLQ replay: on delivery, the DLQ record is removed.
REPLAY_HEADER = "tidegate_replay"

_CELERY_CONTROL_FLOW = (Retry, Ignore, Reject)


class GatedTask(Task[Any, Any]):
    """Base class for tasks that call one gated downstream (see the module docstring).

    Class attributes (also settable as ``@app.task(downstream=..., max_wait_s=...)``):
        downstream: the gate's name.
        max_wait_s: the longest wait in place before parking.
        retry_policy: attempts and backoff for transient failures.
        skip_delivered: consult the delivery ledger and skip a unit whose key the
            downstream already accepted (a redelivery, a replay of a delivered unit).
    """

    abstract = True
    downstream: ClassVar[str] = ""
    max_wait_s: ClassVar[float] = 10.0
    retry_policy: ClassVar[RetryPolicy] = RetryPolicy()
    skip_delivered: ClassVar[bool] = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.downstream:
            raise ConfigurationError(f"task {self.name} has no downstream to gate")
        rt = runtime(self.app)
        key = self.idempotency_key(args, kwargs)
        if self.skip_delivered and rt.ledger.delivered(self.downstream, key):
            log.info("delivery_skipped", task=self.name, key=key, reason="already_delivered")
            self._replay_done(rt, key)
            return {"tidegate": "already_delivered"}
        gate = rt.gate(self.downstream)
        attempt = int(self.request.get(ATTEMPT_HEADER) or 0)
        throttles = 0
        while True:
            try:
                with gate.slot(max_wait=self.max_wait_s):
                    result = self.run(*args, **kwargs)
                rt.ledger.mark(self.downstream, key)
                self._replay_done(rt, key)
                return result
            except _CELERY_CONTROL_FLOW:
                raise
            except Exception as exc:
                verdict = verdict_for(
                    exc, attempt=attempt, throttles=throttles, policy=self.retry_policy
                )
                if verdict.action is Action.RETRY_IN_PLACE:
                    throttles += 1
                    continue
                if verdict.action is Action.REQUEUE:
                    log.error("task_requeued", task=self.name, reason=verdict.reason)
                    raise Reject(verdict.reason, requeue=True) from exc
                if verdict.action is Action.PARK:
                    return self._park(rt, args, kwargs, verdict)
                return self._dead_letter(rt, args, kwargs, verdict, exc)

    def _replay_done(self, rt: Runtime, key: str) -> None:
        """A replayed unit was delivered: its dead letter is resolved."""
        if self.request.get(REPLAY_HEADER) and rt.dlq.remove(key):
            log.info("dlq_item_resolved", task=self.name, key=key)

    def idempotency_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """The unit's key: ``kwargs["idempotency_key"]``, an envelope's ``"key"``, or the id."""
        if "idempotency_key" in kwargs:
            return str(kwargs["idempotency_key"])
        if args and isinstance(args[0], Mapping) and "key" in args[0]:
            return str(args[0]["key"])
        return str(self.request.id)

    def _queue(self) -> str:
        info = self.request.delivery_info or {}
        queue = info.get("routing_key") or getattr(self, "queue", None)
        return str(queue or self.app.conf.task_default_queue)

    def _envelope(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "task": self.name,
            "args": list(args),
            "kwargs": dict(kwargs),
            "queue": self._queue(),
        }

    def _park(
        self, rt: Runtime, args: Sequence[Any], kwargs: Mapping[str, Any], verdict: Verdict
    ) -> dict[str, Any]:
        envelope = self._envelope(args, kwargs)
        envelope["attempt"] = verdict.attempt
        envelope["replay"] = int(self.request.get(REPLAY_HEADER) or 0)
        envelope["key"] = self.idempotency_key(args, kwargs)
        rt.parking.park(envelope, delay_s=verdict.delay_s, reason=verdict.reason)
        return {"tidegate": "parked", "reason": verdict.reason, "delay_s": verdict.delay_s}

    def _dead_letter(
        self,
        rt: Runtime,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        verdict: Verdict,
        exc: BaseException,
    ) -> dict[str, Any]:
        envelope = args[0] if args and isinstance(args[0], Mapping) else {}
        rt.dlq.add(
            DeadLetter(
                key=self.idempotency_key(args, kwargs),
                task=self.name,
                reason=verdict.reason,
                exception=type(exc).__name__,
                attempts=verdict.attempt,
                payload=self._envelope(args, kwargs),
                bl_number=envelope.get("bl_number"),
                batch_id=envelope.get("batch_id"),
            )
        )
        return {"tidegate": "dead_lettered", "reason": verdict.reason}
