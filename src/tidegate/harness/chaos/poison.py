"""The ``poison`` scenario: malformed and oversized documents mixed into the burst.

Truncated interchanges, text that is not EDIFACT, broken message references and an
envelope without a body are mixed in (:func:`poison_documents`); the simulated
downstreams validate what they are sent as a real gateway does (:func:`edifact_problem`).
Each malformed document must be dead-lettered with its own reason, each oversized one
refused at intake before the broker, and every healthy one delivered.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from tidegate.edi.errors import EdifactError
from tidegate.edi.findings import Severity
from tidegate.edi.intake import Intake
from tidegate.errors import ConfigurationError
from tidegate.harness.chaos.scenario import _Scenario
from tidegate.harness.chaos.verdict import Check, _check
from tidegate.harness.scenarios.vessel import DEFAULT_MAX_PAYLOAD_BYTES, RunHandles, Submission

#: What a malformed document of each kind becomes, and the DLQ reason it must get.
POISON_KINDS: dict[str, str] = {
    "truncated": "downstream rejected the document (HTTP 400 truncated_interchange)",
    "not_edifact": "downstream rejected the document (HTTP 400 not_edifact)",
    "reference_mismatch": "downstream rejected the document (HTTP 400 message_reference_mismatch)",
    "missing_body": "malformed unit: envelope lacks 'body'",
}


def edifact_problem(body: Any) -> str | None:
    """A gateway's validation of a write: ``None``, or the code of what is wrong.

    The simulated downstreams run this on every write in the ``poison`` scenario
    (:meth:`tidegate.sim.SimServer.set_document_check`), as a real gateway validates
    what it is sent. It reads the EDIFACT with tidegate's own intake and answers with
    the first error-severity finding (``truncated_message``…), ``not_edifact`` for
    text that is not EDIFACT at all, and ``missing_edifact`` for a body without it.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("edifact"), str):
        return "missing_edifact"
    text: str = body["edifact"]
    try:
        intake = Intake(text.encode("latin-1", errors="replace"))
        results = list(intake)
    except EdifactError:
        return "not_edifact"
    findings = list(intake.findings)
    for result in results:
        findings.extend(result.all_findings())
    for finding in findings:
        if finding.severity is Severity.ERROR:
            return str(finding.code)
    return None if results else "no_message"


def _poison_envelope(kind: str, base: Mapping[str, Any], key: str) -> dict[str, Any]:
    envelope = {**dict(base), "key": key}
    text = str(base["body"])
    if kind == "truncated":
        envelope["body"] = text[: text.index("UNT+")]
    elif kind == "not_edifact":
        envelope["body"] = "%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n"
    elif kind == "reference_mismatch":
        head, _, tail = text.partition("UNT+")
        count, _, rest = tail.partition("+")
        envelope["body"] = f"{head}UNT+{count}+XX{rest}"
    elif kind == "missing_body":
        del envelope["body"]
    elif kind == "oversized":
        filler = "FTX+AAI+++" + "X" * 350 + "'"
        segments = max(1, 2 * DEFAULT_MAX_PAYLOAD_BYTES // len(filler))
        envelope["body"] = text.replace("UNT+", filler * segments + "UNT+", 1)
    else:
        raise ConfigurationError(f"unknown poison kind {kind!r}")
    return envelope


def poison_documents(burst: Sequence[Submission], *, per_kind: int, seed: int) -> list[Submission]:
    """``burst`` with ``per_kind`` documents of each :data:`POISON_KINDS` kind and as
    many oversized ones inserted at random places (new idempotency keys)."""
    rng = random.Random(seed)
    mixed = list(burst)
    kinds = [*POISON_KINDS, "oversized"]
    for index in range(per_kind):
        for kind in kinds:
            base = rng.choice(burst)
            key = f"poison-{kind}-{index:03d}-{base.key[:12]}"
            envelope = _poison_envelope(kind, base.envelope, key)
            mixed.insert(rng.randrange(len(mixed) + 1), Submission(key, base.queue, envelope, kind))
    return mixed


class _Poison(_Scenario):
    def documents(self, burst: list[Submission]) -> list[Submission]:
        return poison_documents(
            burst, per_kind=self.config.poison_per_kind, seed=self.config.vessel.seed
        )

    def started(self, run: RunHandles) -> None:
        run.customs.set_document_check(edifact_problem)
        run.tos_sim.set_document_check(edifact_problem)

    def busy(self, t: float) -> bool:
        return False

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        letters = {d["key"]: d for d in data["dead_letters"]}
        outcomes = []
        for item in run.submissions:
            if item.kind == "document":
                continue
            letter = letters.get(item.key)
            refused = item.key in data["refused_keys"]
            outcomes.append(
                {
                    "key": item.key,
                    "kind": item.kind,
                    "queue": item.queue,
                    "downstream_code": (
                        edifact_problem({"edifact": item.envelope["body"]})
                        if "body" in item.envelope and item.kind != "oversized"
                        else None
                    ),
                    "outcome": "refused_at_intake"
                    if refused
                    else ("dead_lettered" if letter else "other"),
                    "reason": letter["reason"] if letter else None,
                    "exception": letter["exception"] if letter else None,
                    "expected_reason": POISON_KINDS.get(item.kind),
                }
            )
        clean = {i.key for i in run.submissions if i.kind == "document"}
        data.update(
            poison=outcomes,
            clean_dead_lettered=sorted(k for k in letters if k in clean),
            reasons=dict(Counter(f"{o['kind']}: {o['reason']}" for o in outcomes)),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        wrong = [
            o
            for o in chaos["poison"]
            if not (
                (o["kind"] == "oversized" and o["outcome"] == "refused_at_intake")
                or (o["outcome"] == "dead_lettered" and o["reason"] == o["expected_reason"])
            )
        ]
        clean = report["submitted"] - len(chaos["poison"])
        return [
            *super().checks(report),
            _check(
                "poison_dead_lettered_or_refused",
                not wrong,
                len(chaos["poison"]) - len(wrong),
                len(chaos["poison"]),
                "each malformed document in the DLQ with its reason; oversized refused",
            ),
            _check(
                "rest_of_burst_delivered",
                not chaos["clean_dead_lettered"] and report["delivered"] == clean,
                report["delivered"],
                clean,
            ),
            _check(
                "oversized_never_published",
                report["refused_at_intake"] == self.config.poison_per_kind,
                report["refused_at_intake"],
                self.config.poison_per_kind,
            ),
        ]
