"""Fuzzing: whatever the bytes, only EdifactError subclasses, and no hang.

Every input is pushed through the whole intake (tokenizer, envelope, classification,
split, extraction, JSON shapes) in default and strict mode. Hypothesis's ``deadline``
bounds the time per input, so a pathological slowdown fails as loudly as a crash.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.edi import EdifactError, FindingPolicy, Intake, inspect_source
from tidegate.edi.synthetic import synthetic_ifcsum

FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = [path.read_bytes() for path in sorted(FIXTURES.glob("*.edi"))] + [
    synthetic_ifcsum(12, release_every=2),
    synthetic_ifcsum(5, newline="\r\n", una=True, interchanges=2),
]

FUZZ = settings(
    max_examples=150,
    deadline=timedelta(milliseconds=750),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def exercise(data: bytes, *, chunk: int = 0) -> None:
    """Everything a worker or the CLI would do with ``data``; only EdifactError may escape."""
    source = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else data
    report = inspect_source(source, name="fuzz")
    assert report["error"] is None or isinstance(report["error"]["code"], str)
    for policy in (FindingPolicy(), FindingPolicy(strict=True)):
        try:
            for result in Intake(data, policy=policy, max_segment_bytes=4096):
                for unit in result.units:
                    unit.to_dict(raw=True)
                for declaration in result.extraction.vgm:
                    declaration.to_dict()
                for event in result.extraction.events:
                    event.to_dict()
                result.all_findings()
        except EdifactError:
            pass


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes(data: bytes) -> None:
    """Arbitrary bytes: refused on the first bytes, or read; never another exception."""
    exercise(data)


@FUZZ
@given(
    st.sampled_from([b"UNA", b"UNB+", b"UNH+", b"UNA:+.? '", b"\xef\xbb\xbfUNB+UNOW:4+"]),
    st.binary(max_size=3000),
)
def test_random_bytes_after_a_plausible_start(head: bytes, tail: bytes) -> None:
    """Past the first check: the tokenizer and envelope meet garbage everywhere."""
    exercise(head + tail, chunk=7)


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 8))):
        if not data:
            break
        position = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["replace", "insert", "delete", "special"]))
        if action == "replace":
            data[position] = draw(st.integers(0, 255))
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[position : position + draw(st.integers(1, 16))]
        else:
            data[position:position] = draw(
                st.sampled_from([b"'", b"?", b"+", b":", b"UNA:+.? '", b"UNH+", b"UNT+", b"CNI+"])
            )
    return bytes(data)


@FUZZ
@given(mutated(SEEDS), st.integers(0, 64))
def test_mutated_project_fixtures(data: bytes, chunk: int) -> None:
    """Real-shaped input with random damage: segments, separators, envelopes broken."""
    exercise(data, chunk=chunk)


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_truncation_of_the_fixtures(seed: int) -> None:
    """A file cut at every byte position: read as truncated, or refused; never a crash."""
    data = SEEDS[seed]
    step = max(1, len(data) // 400)
    for cut in range(0, len(data), step):
        exercise(data[:cut])


@pytest.mark.corpus
def test_mutated_corpus_files(corpus_dir: Path) -> None:
    """The real samples, damaged at random (hypothesis drives the damage)."""
    corpus = [path.read_bytes() for path in sorted(corpus_dir.glob("*.edi"))]

    @FUZZ
    @given(mutated(corpus), st.integers(0, 64))
    def check(data: bytes, chunk: int) -> None:
        exercise(data, chunk=chunk)

    check()


@pytest.mark.corpus
def test_truncated_corpus_files(corpus_dir: Path) -> None:
    """Every real sample cut at ~100 positions each."""
    for path in sorted(corpus_dir.glob("*.edi")):
        data = path.read_bytes()
        for cut in range(0, len(data), max(1, len(data) // 100)):
            exercise(data[:cut])
