"""The tokenizer: separators, release characters, whitespace, encodings, streaming."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.edi import (
    DEFAULT_DELIMITERS,
    EdifactError,
    FindingCode,
    InvalidServiceStringAdvice,
    NotEdifactError,
    Segment,
    SegmentTooLarge,
    Tokenizer,
)
from tidegate.edi import tokenizer as tokenizer_module
from tidegate.edi.syntax import Delimiters
from tidegate.edi.synthetic import (
    interchange_segments,
    message_segments,
    render,
    synthetic_ifcsum,
)

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def segments_of(data: bytes | list[bytes]) -> tuple[list[Segment], list[FindingCode]]:
    tokenizer = Tokenizer(data)
    segments = list(tokenizer)
    return segments, [finding.code for finding in tokenizer.findings]


def described(segments: list[Segment]) -> list[tuple[object, ...]]:
    return [(s.tag, s.text, s.offset, s.index, s.lead, s.term, s.delimiters) for s in segments]


def test_default_separators_elements_and_components() -> None:
    """Elements are tuples of components; missing positions read as empty."""
    segments, findings = segments_of(b"UNH+1+IFCSUM:D:96A:UN'TSR++++GEN'UNT+3+1'")
    assert [s.tag for s in segments] == ["UNH", "TSR", "UNT"]
    assert segments[0].elements == (("1",), ("IFCSUM", "D", "96A", "UN"))
    assert segments[1].elements == (("",), ("",), ("",), ("GEN",))
    assert segments[0].get(1, 2) == "96A"
    assert segments[0].get(1, 9) == ""
    assert segments[0].get(7) == ""
    assert segments[0].components(1) == ("IFCSUM", "D", "96A", "UN")
    assert findings == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("FTX+AAA+++ANDY?'S", ("ANDY'S",)),
        ("FTX+AAA+++A?:B", ("A:B",)),
        ("FTX+AAA+++A??", ("A?",)),
        ("FTX+AAA+++A???'B", ("A?'B",)),
        ("FTX+AAA+++A?+B:C", ("A+B", "C")),
        ("FTX+AAA+++A??:B", ("A?", "B")),
    ],
)
def test_release_character(text: str, expected: tuple[str, ...]) -> None:
    """``?`` releases the next character anywhere, including the terminator."""
    segments, _ = segments_of(f"UNH+1+X:D:96A:UN'{text}'UNT+3+1'".encode())
    assert [s.tag for s in segments] == ["UNH", "FTX", "UNT"]
    assert segments[1].text == text
    assert segments[1].elements[3] == expected
    assert segments[1].get(3, 0) == expected[0]


def test_offsets_are_byte_offsets_and_raw_reproduces_the_input() -> None:
    """Offsets count bytes (UTF-8 here), and lead + text + terminator is the input."""
    data = "UNB+UNOW:4+S+R+1:1+9'\nUNH+1+X:D:96A:UN'\r\nFTX+AAA+++ÄÖÜ'\tUNT+3+1'UNZ+1+9'".encode()
    segments, findings = segments_of(data)
    assert findings == []
    for segment in segments:
        assert data[segment.offset :].startswith(segment.text.encode())
    assert "".join(s.raw for s in segments).encode() == data
    assert [s.index for s in segments] == list(range(len(segments)))
    assert segments[2].get(3) == "ÄÖÜ"


def test_una_with_custom_separators() -> None:
    """The UNA's separators and release character apply to everything after it."""
    segments, findings = segments_of(fixture("una_custom_separators.edi"))
    assert findings == []
    assert segments[0].tag == "UNA"
    assert segments[0].delimiters == Delimiters("|", "*", ".", "\\", " ", "~")
    nad = next(s for s in segments if s.tag == "NAD")
    assert nad.get(3) == "ACME* SHIPPING ~ LOGISTICS"
    assert nad.normalised() == "NAD+SPC+++ACME* SHIPPING ~ LOGISTICS"
    assert [s.tag for s in segments][-2:] == ["UNT", "UNZ"]


def test_una_without_release_character() -> None:
    """A space in the UNA's release position means no release character at all."""
    segments, _ = segments_of(b"UNA:+.  'UNH+1+X:D:96A:UN'FTX+AAA+++A?B'UNT+3+1'")
    assert segments[0].delimiters.release is None
    assert segments[2].get(3) == "A?B"


def test_two_interchanges_second_with_its_own_una() -> None:
    """Both interchanges are read; the second's UNA switches separators mid-stream."""
    segments, findings = segments_of(fixture("two_interchanges_second_una.edi"))
    assert findings == []
    tags = [s.tag for s in segments]
    assert tags.count("UNB") == 2
    assert tags.count("UNH") == 2
    una = tags.index("UNA")
    assert all(s.delimiters == DEFAULT_DELIMITERS for s in segments[:una])
    coarri = segments[una + 2]
    assert coarri.tag == "UNH"
    assert coarri.get(1, 0) == "COARRI"
    assert coarri.delimiters.element == ";"


def test_bom_crlf_and_tab_indentation() -> None:
    """A leading BOM and whitespace between segments are skipped but kept in lead."""
    segments, findings = segments_of(fixture("bom_crlf_bayplan.edi"))
    assert findings == []
    assert segments[0].tag == "UNB"
    assert segments[0].offset == 3
    assert segments[0].lead == "\ufeff"
    assert segments[1].lead == "\r\n"
    tabbed, findings = segments_of(fixture("tab_indented_cuscar.edi"))
    assert findings == []
    assert [s.tag for s in tabbed].count("RFF") == 2
    assert (tabbed[5].tag, tabbed[5].lead) == ("LOC", "\n\t")
    assert (tabbed[6].tag, tabbed[6].lead) == ("GID", "\n\t\t")


def test_bom_between_concatenated_files() -> None:
    """A second BOM at the start of a second interchange is skipped too."""
    one = render(interchange_segments(message_segments("1", "IFTSTA:D:00B:UN", "BGM+23")))
    segments, findings = segments_of(b"\xef\xbb\xbf" + one + b"\xef\xbb\xbf" + one)
    assert [s.tag for s in segments].count("UNB") == 2
    assert findings == []


def test_not_edifact_and_empty_input() -> None:
    """Non-EDIFACT input fails on its first bytes with a typed, located error."""
    with pytest.raises(NotEdifactError) as caught:
        list(Tokenizer(fixture("not_edifact.txt")))
    assert caught.value.offset == 0
    assert caught.value.code == "not_edifact"
    with pytest.raises(NotEdifactError, match="empty"):
        list(Tokenizer(b" \r\n"))
    with pytest.raises(NotEdifactError):
        list(Tokenizer([]))


@pytest.mark.parametrize(
    "una",
    [b"UNA:+.? ", b"UNAA+.? '", b"UNA::.? '", b"UNA:+.: '", b"UNA \xe9.? '"],
)
def test_unusable_una(una: bytes) -> None:
    """A truncated UNA, or one with clashing or alphanumeric separators, is refused."""
    with pytest.raises(InvalidServiceStringAdvice) as caught:
        list(Tokenizer(una + b"UNH+1+X'"[: 0 if len(una) < 9 else None]))
    assert caught.value.segment_index == 0


def test_segment_too_large() -> None:
    """Memory is capped: no terminator within max_segment_bytes is an error."""
    data = b"UNH+1+X:D:96A:UN'FTX+AAA+++" + b"A" * 5000
    with pytest.raises(SegmentTooLarge) as caught:
        list(
            Tokenizer([data[i : i + 100] for i in range(0, len(data), 100)], max_segment_bytes=1000)
        )
    assert caught.value.limit == 1000
    assert caught.value.segment_index == 1


def test_missing_final_terminator_and_dangling_release() -> None:
    """The last segment is kept even without terminator, and that is reported."""
    segments, findings = segments_of(b"UNH+1+X:D:96A:UN'UNT+2+1")
    assert [s.tag for s in segments] == ["UNH", "UNT"]
    assert segments[1].term == ""
    assert findings == [FindingCode.MISSING_TERMINATOR]
    _, findings = segments_of(b"UNH+1+X:D:96A:UN'FTX+AAA+++A?")
    assert findings == [FindingCode.DANGLING_RELEASE, FindingCode.MISSING_TERMINATOR]


def test_empty_segment_and_invalid_tag_are_findings() -> None:
    """Two terminators in a row and a garbage tag are reported, not fatal."""
    segments, findings = segments_of(b"UNH+1+X:D:96A:UN''bgm+1'UNT+3+1'")
    assert [s.tag for s in segments] == ["UNH", "bgm", "UNT"]
    assert findings == [FindingCode.EMPTY_SEGMENT, FindingCode.INVALID_SEGMENT_TAG]


@pytest.mark.parametrize(
    ("syntax", "payload", "expected_text", "expected_findings"),
    [
        ("UNOC:3", "MÜLLER".encode("latin-1"), "MÜLLER", []),
        ("UNOW:4", "MÜLLER".encode(), "MÜLLER", []),
        ("UNOY:4", "ŁÓDŹ".encode(), "ŁÓDŹ", []),
        ("UNOD:3", "ŁÓDŹ".encode("iso8859-2"), "ŁÓDŹ", []),
        ("UNOB:3", "MÖLLER".encode("latin-1"), "MÖLLER", [FindingCode.OUTSIDE_REPERTOIRE]),
        ("UNOW:4", "MÜLLER".encode("latin-1"), "MÜLLER", [FindingCode.ENCODING_INVALID]),
        ("XXXX:1", "MÜLLER".encode(), "MÜLLER", [FindingCode.UNKNOWN_SYNTAX_IDENTIFIER]),
    ],
)
def test_decoding_follows_the_syntax_identifier(
    syntax: str, payload: bytes, expected_text: str, expected_findings: list[FindingCode]
) -> None:
    """UNOA/B/C -> Latin-1 family, UNOW/UNOY -> UTF-8; mismatches become findings."""
    head = f"UNB+{syntax}+S+R+1:1+9'UNH+1+X:D:96A:UN'NAD+CA+++".encode()
    segments, findings = segments_of(head + payload + b"'UNT+3+1'UNZ+1+9'")
    assert segments[2].get(3) == expected_text
    assert findings == expected_findings


def test_undeclared_latin1_falls_back_with_a_finding() -> None:
    """A bare message in Latin-1 is read, decoded as ISO-8859-1, and reported once."""
    segments, findings = segments_of(fixture("bare_latin1_iftsta.edi"))
    assert segments[2].get(3) == "MÜLLER SPEDITION"
    assert findings == [FindingCode.ENCODING_FALLBACK]


def test_charset_resets_after_unz() -> None:
    """The second interchange's bytes follow its own UNB, not the first one's."""
    first = render(
        interchange_segments(message_segments("1", "X:D:96A:UN", "FTX+AAA+++Ä"), syntax="UNOW:4")
    )
    second = "UNB+UNOC:3+S+R+1:1+8'UNH+1+X:D:96A:UN'FTX+AAA+++Ä'UNT+3+1'UNZ+1+8'"
    segments, findings = segments_of(first + second.encode("latin-1"))
    assert [s.get(3) for s in segments if s.tag == "FTX"] == ["Ä", "Ä"]
    assert findings == []


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    start = 0
    for cut in sorted(cuts):
        yield data[start:cut]
        start = cut
    yield data[start:]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_chunk_boundaries_do_not_matter(data: st.DataObject) -> None:
    """Cutting the input anywhere (mid-segment, mid-UNA, mid-release) changes nothing."""
    name = data.draw(
        st.sampled_from(
            [
                "una_custom_separators.edi",
                "two_interchanges_second_una.edi",
                "bom_crlf_bayplan.edi",
                "tab_indented_cuscar.edi",
                "truncated_ifcsum.edi",
            ]
        )
    )
    raw = fixture(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    whole, whole_findings = segments_of(raw)
    parts, part_findings = segments_of(list(chunked(raw, cuts)))
    assert described(parts) == described(whole)
    assert part_findings == whole_findings


@pytest.mark.parametrize(
    "data",
    [
        fixture("una_custom_separators.edi"),
        fixture("two_interchanges_second_una.edi"),
        fixture("tab_indented_cuscar.edi"),
        fixture("bom_crlf_bayplan.edi"),
        fixture("bare_latin1_iftsta.edi"),
        synthetic_ifcsum(300, newline="\r\n", release_every=3),
        synthetic_ifcsum(300, delimiters=Delimiters("|", "*", ".", "\\", " ", "~")),
        synthetic_ifcsum(300, interchanges=3, una=True),
    ],
)
def test_fast_pass_equals_the_careful_loop(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk fast pass is an optimisation only: same segments, same findings."""
    fast = segments_of([data[i : i + 997] for i in range(0, len(data), 997)])
    monkeypatch.setattr(tokenizer_module, "_fast_pass", lambda *_, **__: ([], 0, False))
    slow = segments_of([data[i : i + 997] for i in range(0, len(data), 997)])
    assert described(fast[0]) == described(slow[0])
    assert fast[1] == slow[1]


def _peak_while_tokenizing(data: bytes) -> tuple[int, int]:
    def chunks() -> Iterator[bytes]:
        for start in range(0, len(data), 1 << 16):
            yield data[start : start + (1 << 16)]

    tracemalloc.start()
    try:
        count = sum(len(batch) for batch in Tokenizer(chunks()).batches())
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_flat_in_stream_size() -> None:
    """Four times the input, same peak: the tokenizer holds a chunk, not the stream."""
    small_count, small_peak = _peak_while_tokenizing(synthetic_ifcsum(400, interchanges=2))
    large_count, large_peak = _peak_while_tokenizing(synthetic_ifcsum(400, interchanges=8))
    assert large_count > 3.9 * small_count
    assert large_peak < small_peak * 1.2 + 256 * 1024
    assert large_peak < 4 * 1024 * 1024


def _all_segments(data: bytes, chunk: int) -> tuple[list[tuple[object, ...]], list[FindingCode]]:
    source = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else data
    tokenizer = Tokenizer(source)
    try:
        segments = described(list(tokenizer))
    except EdifactError as exc:
        segments = [("raised", type(exc), exc.offset)]
    return segments, [finding.code for finding in tokenizer.findings]


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(sorted(FIXTURES.glob("*.edi"))),
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(list(b"'?+:\r\n\xef ~UNA"))),
        max_size=6,
    ),
    st.integers(0, 50),
)
def test_fast_pass_equals_the_careful_loop_on_damaged_input(
    path: Path, damage: list[tuple[int, int]], chunk: int
) -> None:
    """Damaged input (stray terminators, releases, BOM bytes, UNAs): still identical."""
    data = bytearray(path.read_bytes())
    for position, byte in damage:
        data.insert(position % (len(data) + 1), byte)
    fast = _all_segments(bytes(data), chunk)
    with mock.patch.object(tokenizer_module, "_fast_pass", return_value=([], 0, False)):
        slow = _all_segments(bytes(data), chunk)
    assert fast == slow
