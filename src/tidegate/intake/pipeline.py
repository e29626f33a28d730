"""Carry out the intake's decision: claim, check the queues, publish, record, answer.

The order is what makes an acknowledgement safe:

1. read the interchange; check that the client owns its UNB sender id;
2. claim the interchange in the duplicate window (atomic: one of two concurrent
   copies wins, the other is told it is a duplicate or to retry);
3. ask the admission which of the units' queues are above their HWM (for units it
   would not shed to the quarantine);
4. :func:`~tidegate.intake.decision.decide` — pure — says what to answer;
5. publish every unit, and only then record the interchange as accepted;
6. answer with the CONTRL.

Anything that fails between 2 and 5 drops the claim and answers 503: no CONTRL went
out, so the sender sends again. If some units were already on the broker, they are
published again then, and their idempotency keys keep the downstream exactly-once.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from datetime import UTC, datetime

from tidegate.edi.classify import DEFAULT_ROUTES, Route
from tidegate.edi.findings import DEFAULT_POLICY, FindingPolicy
from tidegate.edi.tokenizer import DEFAULT_MAX_SEGMENT_BYTES
from tidegate.errors import BackendError
from tidegate.intake.auth import ANONYMOUS, Client
from tidegate.intake.decision import Claim, Decision, decide, retry
from tidegate.intake.duplicates import DuplicateStore
from tidegate.intake.faults import NO_FAULT, FaultPoint
from tidegate.intake.publisher import Publisher
from tidegate.intake.reading import InterchangeHeader, Reading, read_interchange
from tidegate.logging import get_logger

__all__ = ["DEFAULT_RETRY_AFTER_S", "IntakePipeline"]

log = get_logger("tidegate.intake")

#: ``Retry-After`` of a 503, seconds: about one monitor sampling period, so that a
#: retry sees a new load state.
DEFAULT_RETRY_AFTER_S = 30


def _contrl_reference() -> str:
    """A CONTRL's own control reference: 14 characters, unique enough per sender."""
    return secrets.token_hex(7).upper()


class IntakePipeline:
    """One request in, one :class:`~tidegate.intake.decision.Decision` out.

    Args:
        duplicates: the duplicate window.
        publisher: the admission (saturation and publishing).
        policy / routes / max_segment_bytes: how interchanges are read.
        retry_after_s: the ``Retry-After`` of a 503.
        now: the CONTRL's preparation time (injectable).
        token / contrl_reference: random values (injectable for tests).
        fault: a crash-test fault point (:mod:`tidegate.intake.faults`).
    """

    def __init__(
        self,
        *,
        duplicates: DuplicateStore,
        publisher: Publisher,
        policy: FindingPolicy = DEFAULT_POLICY,
        routes: tuple[Route, ...] = DEFAULT_ROUTES,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        retry_after_s: int = DEFAULT_RETRY_AFTER_S,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        token: Callable[[], str] = lambda: secrets.token_hex(16),
        contrl_reference: Callable[[], str] = _contrl_reference,
        fault: FaultPoint = NO_FAULT,
    ) -> None:
        self.duplicates = duplicates
        self.publisher = publisher
        self.policy = policy
        self.routes = routes
        self.max_segment_bytes = max_segment_bytes
        self.retry_after_s = retry_after_s
        self._now = now
        self._token = token
        self._contrl_reference = contrl_reference
        self.fault = fault

    def submit(self, body: bytes, client: Client = ANONYMOUS) -> Decision:
        """Decide on ``body`` and carry the decision out; the answer is returned.

        Raises:
            EdifactError: the body is not EDIFACT the intake can read.
            IntakeError: one interchange is not what the body holds, or the client
                does not own its sender id.
            PayloadTooLarge: a unit is above the admission's payload limit (nothing
                was published).
        """
        reading = read_interchange(
            body, policy=self.policy, routes=self.routes, max_segment_bytes=self.max_segment_bytes
        )
        header = reading.header
        if header is not None:
            client.check_sender(header.sender)
        token = self._token()
        claim = Claim.NOT_CHECKED
        try:
            if header is not None:
                claim = self.duplicates.claim(header.sender, header.control_reference, token).claim
            decision = self._carry_out(reading, claim)
        except BackendError as exc:
            self._release(header, claim, token)
            decision = retry(reading, "backend_unavailable", retry_after_s=self.retry_after_s)
            log.warning("intake_backend_unavailable", client=client.name, error=str(exc))
        except BaseException:
            self._release(header, claim, token)
            raise
        else:
            if header is not None and claim is Claim.NEW:
                decision = self._settle(decision, reading, header, token)
        self._log(decision, reading, client)
        return decision

    def close(self) -> None:
        """Stop what the publisher runs in the background (its publishing thread)."""
        close = getattr(self.publisher, "close", None)
        if close is not None:
            close()

    def _settle(
        self, decision: Decision, reading: Reading, header: InterchangeHeader, token: str
    ) -> Decision:
        """Record an accepted interchange, or drop the claim of one that was not."""
        if not decision.record:
            if decision.release:
                self._release(header, Claim.NEW, token)
            return decision
        try:
            held = self.duplicates.confirm(header.sender, header.control_reference, token)
        except BackendError:
            # The units are on the broker but the interchange is not remembered: no
            # CONTRL, so the sender retries and the units' idempotency keys absorb it.
            self._release(header, Claim.NEW, token)
            return retry(reading, "backend_unavailable", retry_after_s=self.retry_after_s)
        if not held:
            log.warning(
                "intake_claim_lapsed",
                sender=header.sender,
                control_reference=header.control_reference,
            )
        return decision

    def _carry_out(self, reading: Reading, claim: Claim) -> Decision:
        units = reading.units
        saturated: frozenset[str] = frozenset()
        if units and claim in (Claim.NEW, Claim.NOT_CHECKED):
            saturated = self.publisher.saturated(units)
        decision = decide(
            reading,
            claim=claim,
            saturated=saturated,
            contrl_reference=self._contrl_reference(),
            now=self._now(),
            retry_after_s=self.retry_after_s,
        )
        if decision.publish:
            self.publisher.publish(decision.publish)
            self.fault.reached("after_publish")
        return decision

    def _release(self, header: InterchangeHeader | None, claim: Claim, token: str) -> None:
        if header is None or claim is not Claim.NEW:
            return
        # Best effort: an unreleased claim expires after its lease anyway.
        with contextlib.suppress(BackendError):
            self.duplicates.release(header.sender, header.control_reference, token)

    def _log(self, decision: Decision, reading: Reading, client: Client) -> None:
        header = reading.header
        log.info(
            "intake_decided",
            status=decision.status.value,
            reason=decision.reason,
            http_status=decision.http_status,
            client=client.name,
            sender=header.sender if header is not None else None,
            control_reference=header.control_reference if header is not None else None,
            messages=len(reading.messages),
            rejected_messages=sum(1 for m in reading.messages if m.rejected),
            units=len(decision.publish),
            queues=sorted({u.queue for u in decision.publish}),
            saturated=list(decision.saturated),
            contrl=decision.contrl is not None,
        )
