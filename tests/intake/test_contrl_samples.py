"""Every CONTRL the intake writes for a sample reads back, through tidegate and pydifact.

The samples are the project's own fixtures (``tests/edi/fixtures``) and, when
``TIDEGATE_EDIFACT_CORPUS`` names a folder of real interchanges, every file in it. For
each interchange the intake can answer for, both answers it may give — the one to a
first copy, and the one to a duplicate (code 26) — are written and read back.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydifact.segmentcollection import Interchange as PydifactInterchange

from tidegate.edi import EnvelopeReader, Severity
from tidegate.errors import EdifactError
from tidegate.intake import Claim, IntakeError, decide, read_interchange

FIXTURES = Path(__file__).parent.parent / "edi" / "fixtures"
CORPUS_ENV = "TIDEGATE_EDIFACT_CORPUS"
NOW = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)

pytestmark = pytest.mark.filterwarnings("ignore::pydifact.exceptions.MissingImplementationWarning")


def _samples() -> list[Path]:
    files = sorted(p for p in FIXTURES.iterdir() if p.is_file())
    corpus = os.environ.get(CORPUS_ENV)
    if corpus and Path(corpus).is_dir():
        files += sorted(p for p in Path(corpus).rglob("*") if p.is_file())
    return files


def _contrls(body: bytes) -> list[str]:
    """The CONTRLs the intake would send for ``body`` (none: refused or a bare message)."""
    try:
        reading = read_interchange(body)
    except (IntakeError, EdifactError):
        return []  # refused with a typed error (tested in test_reading): no CONTRL
    texts = []
    for claim in (Claim.NEW, Claim.DUPLICATE):
        decision = decide(
            reading,
            claim=claim,
            saturated=frozenset(),
            contrl_reference="CTL1",
            now=NOW,
            retry_after_s=5,
        )
        if decision.contrl is not None:
            texts.append(decision.contrl)
    return texts


def _reads_back(text: str, body: bytes) -> None:
    reader = EnvelopeReader(text.encode("latin-1"))
    messages = list(reader)
    assert [m.type for m in messages] == ["CONTRL"]
    problems = [f for m in messages for f in m.findings] + list(reader.findings)
    assert [f.code for f in problems if f.severity is not Severity.INFO] == []
    (interchange,) = reader.interchanges
    assert interchange.closed
    original = read_interchange(body).header
    assert original is not None
    assert (interchange.sender, interchange.recipient) == (original.recipient, original.sender)
    parsed = PydifactInterchange.from_str(text)
    tags = [s.tag for s in parsed.segments]
    assert tags[0] == "UNH"
    assert tags[1] == "UCI"
    assert tags[-1] == "UNT"
    assert parsed.segments[1].elements[0] == original.control_reference


def test_the_project_fixtures_give_contrls_to_read_back() -> None:
    """Guard: the fixtures exercise this (UNA, groups, BOM/CRLF, errors), not nothing."""
    answered = [p.name for p in _samples() if p.parent == FIXTURES and _contrls(p.read_bytes())]
    assert len(answered) >= 5, answered


@pytest.mark.parametrize("path", _samples(), ids=lambda p: p.name)
def test_every_contrl_for_a_sample_reads_back(path: Path) -> None:
    """Both readers see one CONTRL, addressed back to the sender, referring to its UNB."""
    body = path.read_bytes()
    for text in _contrls(body):
        _reads_back(text, body)
