"""Edge inputs (issue #13 item 8): huge counts, escaped terminators, floods of findings.

Each test pins one way a hostile or broken file used to hurt the reader: an untyped
``ValueError``, time quadratic in a segment's length, memory growing with the number of
findings, or a report that depended on how the bytes happened to be chunked.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tidegate.edi import (
    DEFAULT_MAX_FINDINGS_PER_CODE,
    EdifactError,
    EnvelopeReader,
    FindingCode,
    FindingPolicy,
    SegmentTooLarge,
    Tokenizer,
    inspect_source,
)
from tidegate.edi import tokenizer as tokenizer_module
from tidegate.edi.synthetic import synthetic_ifcsum

UNB = b"UNB+UNOA:3+SENDER+RECEIVER+240115:1200+IC1'"
HUGE = b"9" * 5000


def chunks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def count_findings(report: dict[str, Any], code: FindingCode) -> list[dict[str, Any]]:
    return [finding for finding in report["findings"] if finding["code"] == code.value]


# --- control counts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "trailer"),
    [
        (UNB + b"UNH+1+IFTSTA:D:00B:UN'BGM+23'UNT+" + HUGE + b"+1'UNZ+1+IC1'", "UNT"),
        (UNB + b"UNG+X+S+R+1+G1+UN+1'UNE+" + HUGE + b"+G1'UNZ+1+IC1'", "UNE"),
        (UNB + b"UNH+1+IFTSTA:D:00B:UN'BGM+23'UNT+3+1'UNZ+" + HUGE + b"+IC1'", "UNZ"),
    ],
)
def test_a_control_count_of_thousands_of_digits_is_a_finding(data: bytes, trailer: str) -> None:
    """5,000 digits: reported as an unusable count, never Python's integer-string limit."""
    report = inspect_source(data, name="huge-count")
    assert report["error"] is None
    (finding,) = count_findings(report, FindingCode.INVALID_CONTROL_COUNT)
    what = "UNT segment count" if trailer == "UNT" else f"{trailer} count"
    assert finding["message"] == f"{what} has 5000 digits, more than any count can have"


def test_leading_zeros_do_not_make_a_count_unusable() -> None:
    """Zero padding is not size: 4,999 zeros and a 3 is the count 3."""
    data = UNB + b"UNH+1+IFTSTA:D:00B:UN'BGM+23'UNT+" + b"0" * 4999 + b"3+1'UNZ+1+IC1'"
    report = inspect_source(data, name="padded")
    assert report["findings"] == []


# --- linear time, bounded buffer ------------------------------------------------------


def escaped_terminators(count: int) -> bytes:
    """One FTX whose text is ``count`` escaped terminators (``?'``), in a whole message."""
    return UNB + b"UNH+1+IFTSTA:D:00B:UN'FTX+AAA+++" + b"?'" * count + b"'UNT+3+1'UNZ+1+IC1'"


def bytes_scanned(source: bytes | list[bytes]) -> int:
    """Bytes of every buffer the tokenizer started cutting, summed.

    Every buffer is scanned from position 0 once before anything else, so summing those
    calls counts how often each input byte is looked at by the cutting passes.
    """
    scanned = 0
    real: Callable[[bytes, int], int] = tokenizer_module._skip_lead

    def counting(data: bytes, pos: int) -> int:
        nonlocal scanned
        if pos == 0:
            scanned += len(data)
        return real(data, pos)

    with mock.patch.object(tokenizer_module, "_skip_lead", counting):
        assert [s.tag for s in Tokenizer(source)] == ["UNB", "UNH", "FTX", "UNT", "UNZ"]
    return scanned


@pytest.mark.parametrize("chunk", [7, 1024, 1 << 16])
def test_a_long_escaped_segment_is_scanned_a_bounded_number_of_times(chunk: int) -> None:
    """Each byte is looked at a few times whatever the chunking, not once per chunk."""
    data = escaped_terminators(200_000)
    assert bytes_scanned(chunks_of(data, chunk)) <= 4 * len(data)


def test_escaped_terminators_do_not_lift_the_segment_cap() -> None:
    """A segment kept open by ``?'`` pairs is still one segment: the cap applies."""
    data = escaped_terminators(5_000)
    for source in (data, chunks_of(data, 3), chunks_of(data, 4096)):
        with pytest.raises(SegmentTooLarge) as caught:
            list(Tokenizer(source, max_segment_bytes=4096))
        assert caught.value.segment_index == 2


def test_a_una_makes_the_old_element_separator_data() -> None:
    """A tag read before a UNA is not trusted after it: the same interchange gets the
    same findings whether or not another interchange came first."""
    first = b"UNB+UNOA:3+S+R+1+1'UNH+1+X'BGM+1'UNT+3+1'UNZ+1+1'"
    second = b"UNA:*.? 'UNB*UNOA:3*S*R*1*2'UNH*1*X'BGM+1'UNT*3*1'UNZ*1*2'"
    alone, after = Tokenizer(second), Tokenizer(first + second)
    list(alone), list(after)
    assert [f.code for f in alone.findings] == [FindingCode.INVALID_SEGMENT_TAG]
    assert [f.code for f in after.findings] == [FindingCode.INVALID_SEGMENT_TAG]
    assert after.findings[0].offset == len(first) + alone.findings[0].offset


# --- bounded findings -----------------------------------------------------------------


def invalid_tags(count: int, *, inside_message: bool) -> bytes:
    body = b"1'" * count
    if inside_message:
        return UNB + b"UNH+1+IFTSTA:D:00B:UN'" + body + b"UNT+3+1'UNZ+1+IC1'"
    return UNB + body + b"UNZ+0+IC1'"


def test_identical_findings_are_capped_with_a_counted_summary() -> None:
    """10,000 invalid tags: the first 100 listed, one summary counting the other 9,900."""
    tokenizer = Tokenizer(invalid_tags(10_000, inside_message=True))
    assert sum(1 for _ in tokenizer) == 10_004
    invalid = [f for f in tokenizer.findings if f.code is FindingCode.INVALID_SEGMENT_TAG]
    assert len(invalid) == DEFAULT_MAX_FINDINGS_PER_CODE + 1
    assert [f.count for f in invalid[:-1]] == [1] * DEFAULT_MAX_FINDINGS_PER_CODE
    summary = invalid[-1]
    assert summary.count == 10_000 - DEFAULT_MAX_FINDINGS_PER_CODE
    assert summary.segment_index == 2 + DEFAULT_MAX_FINDINGS_PER_CODE


@pytest.mark.parametrize("inside_message", [True, False])
def test_the_report_keeps_the_total_in_bounded_findings(inside_message: bool) -> None:
    """In the JSON report too: at most the cap plus one summary, and the counts add up."""
    report = inspect_source(invalid_tags(5_000, inside_message=inside_message), name="tags")
    invalid = count_findings(report, FindingCode.INVALID_SEGMENT_TAG)
    assert len(invalid) == DEFAULT_MAX_FINDINGS_PER_CODE + 1
    assert sum(finding["count"] for finding in invalid) == 5_000


def test_findings_about_many_messages_are_capped_in_the_report() -> None:
    """The cap also holds across messages: 300 wrong UNT counts, 101 entries, total 300."""
    message = b"UNH+1+IFTSTA:D:00B:UN'BGM+23'UNT+9+1'"
    report = inspect_source(UNB + message * 300 + b"UNZ+300+IC1'", name="counts")
    mismatches = count_findings(report, FindingCode.UNT_COUNT_MISMATCH)
    assert len(mismatches) == DEFAULT_MAX_FINDINGS_PER_CODE + 1
    assert sum(finding["count"] for finding in mismatches) == 300


def test_strict_reading_still_stops_at_the_first_error() -> None:
    """The cap never swallows the finding a strict reader must raise."""
    with pytest.raises(EdifactError):
        list(
            EnvelopeReader(
                invalid_tags(500, inside_message=True), policy=FindingPolicy(strict=True)
            )
        )


def peak_of_inspecting(data: bytes) -> int:
    tracemalloc.start()
    try:
        inspect_source(chunks_of(data, 512), name="peak")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_flat_in_the_number_of_invalid_tags_outside_messages() -> None:
    """Four times the invalid segments, about the same peak: no list grows with them.

    Read in 512-byte chunks, so that both inputs are many buffers long and both peaks
    include a full batch of segments.
    """
    small = peak_of_inspecting(invalid_tags(2_500, inside_message=False))
    large = peak_of_inspecting(invalid_tags(10_000, inside_message=False))
    assert large < small * 1.2 + 256 * 1024


# --- the same report for any chunking -------------------------------------------------


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut at random places, or in small fixed-size pieces."""
    if draw(st.booleans()):
        return chunks_of(data, draw(st.integers(1, 9))) if data else []
    cuts = sorted(draw(st.sets(st.integers(0, len(data)), max_size=30)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


FRAGMENTS = [
    b"'", b"?", b"?'", b"??'", b"+", b":", b" ", b"\r\n", b"\xef\xbb\xbf", b"\xe4", b"1'",
    b"UNA:+.? '", b"UNA\x00/;.! #", b"UNA|*.\\ ~", b"UNB+UNOC:3+S+R+1+9'", b"UNZ+1+9'",
    b"UNH+1+IFCSUM:D:96A:UN'", b"UNH+2+VERMAS:D:16A:UN'", b"UNT+3+1'", b"CNI+1+C1'",
    b"RFF+BM:B1'", b"EQD+CN+MSCU1234566'", b"UNT+" + HUGE + b"+1'",
]  # fmt: skip

DOCUMENTS = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(lambda parts: UNB + b"".join(parts)),
    st.binary(max_size=400).map(lambda tail: UNB + tail),
    st.sampled_from([synthetic_ifcsum(4, release_every=2), synthetic_ifcsum(3, una=True)]).map(
        lambda seed: seed[: len(seed) // 2] + b"UNA\x00/;.! #" + seed[len(seed) // 2 :]
    ),
)


def tokens(source: bytes | list[bytes], *, strict: bool) -> tuple[object, ...]:
    tokenizer = Tokenizer(source, max_segment_bytes=64, policy=FindingPolicy(strict=strict))
    seen: list[tuple[object, ...]] = []
    error = None
    try:
        seen.extend((s.tag, s.text, s.offset, s.index, s.lead, s.term) for s in tokenizer)
    except EdifactError as exc:
        error = (type(exc), str(exc))
    return seen, tokenizer.findings, tokenizer.segment_count, error


TWO_INTERCHANGES_THEN_BAD_UNA = UNB + b"UNH+1+X'UNT+2+1'UNZ+1+IC1'UNA\x00/;.! #"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(
    data=TWO_INTERCHANGES_THEN_BAD_UNA, chunks=[UNB, TWO_INTERCHANGES_THEN_BAD_UNA[len(UNB) :]]
)
@given(
    data=st.shared(DOCUMENTS, key="doc"), chunks=st.shared(DOCUMENTS, key="doc").flatmap(chunkings)
)
def test_the_report_is_the_same_for_any_chunking(data: bytes, chunks: list[bytes]) -> None:
    """Same bytes, any cuts: the same report, findings and error included."""
    assert inspect_source(chunks, name="x") == inspect_source(data, name="x")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.shared(DOCUMENTS, key="doc"),
    chunks=st.shared(DOCUMENTS, key="doc").flatmap(chunkings),
    strict=st.booleans(),
)
def test_segments_findings_and_errors_are_the_same_for_any_chunking(
    data: bytes, chunks: list[bytes], strict: bool
) -> None:
    """Down to the tokenizer, with a small segment cap and strict reading too."""
    assert tokens(chunks, strict=strict) == tokens(data, strict=strict)


def test_property_inputs_really_are_chunked() -> None:
    """The chunking strategy yields the same bytes, cut (guards the property tests)."""

    @settings(max_examples=50, deadline=None)
    @given(st.shared(DOCUMENTS, key="d"), st.shared(DOCUMENTS, key="d").flatmap(chunkings))
    def check(data: bytes, chunks: list[bytes]) -> None:
        assert b"".join(chunks) == data

    check()
