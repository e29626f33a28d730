"""IFCSUM split: one unit per CNI group, B/L sources, dead letters, idempotency keys."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

from tidegate.edi import (
    BLUnit,
    EnvelopeReader,
    FindingCode,
    Intake,
    idempotency_key,
    split_ifcsum,
)
from tidegate.edi.syntax import Delimiters
from tidegate.edi.synthetic import (
    interchange_segments,
    message_segments,
    render,
    synthetic_ifcsum,
)

FIXTURES = Path(__file__).parent / "fixtures"


def units_of(data: bytes) -> list[BLUnit]:
    return [unit for result in Intake(data) for unit in result.units]


def manifest(*consignments: list[str], reference: str = "IC1", sender: str = "FWD") -> bytes:
    body = ["BGM+785+MF1+9"]
    for consignment in consignments:
        body.extend(consignment)
    return render(
        interchange_segments(
            message_segments("M1", "IFCSUM:D:96A:UN", *body), reference=reference, sender=sender
        )
    )


def test_every_bl_source_and_dead_letter_reason() -> None:
    """RFF+BM wins; RFF+BN is a flagged fallback; nothing or ambiguity dead-letters."""
    units = units_of((FIXTURES / "ifcsum_bl_sources.edi").read_bytes())
    assert [(u.position, u.bl_number, u.bl_source, u.dead_letter) for u in units] == [
        (1, "HLCUBL0001", "RFF+BM", False),
        (2, "BOOK0002", "RFF+BN", False),
        (3, None, None, True),
        (4, None, None, True),
    ]
    assert [f.code for f in units[1].findings] == [
        FindingCode.DUPLICATE_CONSIGNMENT_NUMBER,
        FindingCode.BL_FROM_BOOKING,
        FindingCode.CONTAINER_SPACE,
    ]
    assert units[2].dead_letter_reason == (
        "consignment has no RFF+BM or RFF+BN; RFF present: FF; the message header's "
        "RFF+BM 'MASTERBL1' is not applied per consignment"
    )
    assert units[3].dead_letter_reason is not None
    assert "2 different RFF+BM values" in units[3].dead_letter_reason
    assert [c.normalised for c in units[0].containers] == ["MSCU1234566"]
    assert [(c.normalised, c.valid) for c in units[2].containers] == [("CBHU1234567", False)]
    assert FindingCode.LOCODE_SHAPE in [f.code for f in units[2].findings]


def test_never_a_synthesized_bl() -> None:
    """The CNI's own number is not a B/L: without RFF the unit is dead-lettered."""
    (unit,) = units_of(manifest(["CNI+1+MSCUXP080935", "GID+1+10:CT"]))
    assert unit.bl_number is None
    assert unit.consignment_number == "MSCUXP080935"
    assert unit.dead_letter_reason == "consignment has no RFF+BM or RFF+BN; no RFF in the group"


def test_empty_bm_value_is_not_a_bl() -> None:
    """``RFF+BM:`` with no value is reported as such, and not used."""
    (unit,) = units_of(manifest(["CNI+1+C1", "RFF+BM:"]))
    assert unit.dead_letter
    assert unit.dead_letter_reason is not None
    assert "empty value" in unit.dead_letter_reason


def test_duplicate_consignment_numbers_still_get_distinct_keys() -> None:
    """120 identical consignments in one message: 120 units, 120 keys, none dropped."""
    same = ["CNI+1+SAME", "RFF+BM:BL1", "GID+1+1:CT"]
    units = units_of(manifest(*[same] * 120))
    assert len(units) == 120
    assert len({unit.idempotency_key for unit in units}) == 120
    assert [u.position for u in units] == list(range(1, 121))
    duplicates = [
        u for u in units if FindingCode.DUPLICATE_CONSIGNMENT_NUMBER in {f.code for f in u.findings}
    ]
    assert len(duplicates) == 119


def test_keys_are_stable_across_replays_and_reformatting() -> None:
    """The same interchange re-sent, re-wrapped or re-separated gives the same keys."""
    plain = synthetic_ifcsum(40, seed=7)
    crlf = synthetic_ifcsum(40, seed=7, newline="\r\n")
    custom = synthetic_ifcsum(40, seed=7, delimiters=Delimiters("|", "*", ",", "\\", " ", "~"))
    keys = [u.idempotency_key for u in units_of(plain)]
    assert len(set(keys)) == 40
    assert [u.idempotency_key for u in units_of(plain)] == keys
    assert [u.idempotency_key for u in units_of(crlf)] == keys
    assert [u.idempotency_key for u in units_of(custom)] == keys


def test_keys_change_with_sender_or_control_reference() -> None:
    """Another interchange reference or sender is another document."""
    consignment = ["CNI+1+C1", "RFF+BM:BL1"]
    base = units_of(manifest(consignment))[0].idempotency_key
    assert units_of(manifest(consignment, reference="IC2"))[0].idempotency_key != base
    assert units_of(manifest(consignment, sender="OTHER"))[0].idempotency_key != base
    assert units_of(manifest(consignment))[0].idempotency_key == base


def test_key_encoding_is_unambiguous() -> None:
    """Shifting text between fields never produces the same key."""
    one = idempotency_key(
        sender="AB",
        interchange_reference="C",
        message_reference="M",
        position=1,
        normalised_text="X'",
    )
    two = idempotency_key(
        sender="A",
        interchange_reference="BC",
        message_reference="M",
        position=1,
        normalised_text="X'",
    )
    assert one != two
    assert len(one) == 64


def test_raw_text_is_the_input_unchanged() -> None:
    """Raw text is exactly what was sent for the group, whitespace and releases kept."""
    data = (FIXTURES / "tab_indented_cuscar.edi").read_bytes().replace(b"CUSCAR", b"IFCSUM")
    text = data.decode("latin-1")
    units = units_of(data)
    assert len(units) == 2
    for unit in units:
        assert unit.raw in text
        assert unit.raw.startswith("CNI+")
        assert unit.raw.endswith("'")
    assert "O?'BRIEN?'S PALLETS?+BAGS'" in units[1].raw
    assert "\n\t\tGID+1+20:PE'" in units[1].raw
    crlf = synthetic_ifcsum(3, newline="\r\n")
    for unit in units_of(crlf):
        assert unit.raw in crlf.decode()
        assert "'\r\n" in unit.raw


def test_truncated_manifest_dead_letters_only_the_cut_consignment() -> None:
    """Consignments before the cut are complete; the last one may not be."""
    units = units_of((FIXTURES / "truncated_ifcsum.edi").read_bytes())
    assert [(u.bl_number, u.dead_letter) for u in units] == [
        ("BL000001", False),
        ("BL000002", True),
    ]
    assert units[1].dead_letter_reason == (
        "the message ends before its UNT: this consignment may be incomplete"
    )
    assert [f.code for f in units[1].findings] == [FindingCode.CONSIGNMENT_TRUNCATED]
    assert units[1].raw.endswith("HALF A DESCRIPT")


def test_manifest_without_consignments_is_reported() -> None:
    """No CNI: no unit, and a finding on the result instead of silence."""
    (result,) = Intake(manifest())
    assert result.units == ()
    assert [f.code for f in result.findings] == [FindingCode.NO_CONSIGNMENTS]


def test_split_of_a_read_message_equals_the_streaming_split() -> None:
    """split_ifcsum on a buffered message and the Intake's streaming splitter agree."""
    data = (FIXTURES / "ifcsum_bl_sources.edi").read_bytes()
    (message,) = EnvelopeReader(data)
    assert message.consumer is None
    buffered = split_ifcsum(message)
    streamed = units_of(data)
    assert buffered == streamed
    (result,) = Intake(data)
    assert split_ifcsum(result.message) == streamed


def test_unit_json_shape() -> None:
    """The JSON shape used by ``tidegate edi split``; raw text only on request."""
    (unit,) = units_of(manifest(["CNI+1+C1", "RFF+BM:BL1", "EQD+CN+CSQU3054383"]))
    data = unit.to_dict()
    assert "raw" not in data
    assert data["bl_number"] == "BL1"
    assert data["containers"] == [{"number": "CSQU3054383", "valid": True, "segment_index": 5}]
    assert unit.to_dict(raw=True)["raw"] == "CNI+1+C1'RFF+BM:BL1'EQD+CN+CSQU3054383'"


def _peak_while_splitting(data: bytes) -> tuple[int, int]:
    chunks = (data[i : i + 65536] for i in range(0, len(data), 65536))
    tracemalloc.start()
    try:
        units = 0
        for result in Intake(chunks):
            units += len(result.units)
            del result  # like a worker: one message's units at a time
        return units, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_split_memory_is_flat_in_the_number_of_messages() -> None:
    """Memory follows the largest message, not the file: 4x the messages, same peak."""
    small_units, small_peak = _peak_while_splitting(synthetic_ifcsum(300, interchanges=2))
    large_units, large_peak = _peak_while_splitting(synthetic_ifcsum(300, interchanges=8))
    assert (small_units, large_units) == (600, 2400)
    assert large_peak < small_peak * 1.1 + 128 * 1024


def test_keys_survive_a_terminator_change_with_a_literal_apostrophe() -> None:
    """Under ``~`` an apostrophe is plain data; canonically it is released: same key."""
    tilde = (
        b"UNA:+.? ~UNB+UNOC:3+S+R+1:1+9~UNH+1+IFCSUM:D:96A:UN~CNI+1+C~RFF+BM:B1~"
        b"FTX+AAA+++O'BRIEN~UNT+5+1~UNZ+1+9~"
    )
    plain = (
        b"UNB+UNOC:3+S+R+1:1+9'UNH+1+IFCSUM:D:96A:UN'CNI+1+C'RFF+BM:B1'"
        b"FTX+AAA+++O?'BRIEN'UNT+5+1'UNZ+1+9'"
    )
    (tilde_unit,) = units_of(tilde)
    (plain_unit,) = units_of(plain)
    assert tilde_unit.idempotency_key == plain_unit.idempotency_key
    assert tilde_unit.raw == "CNI+1+C~RFF+BM:B1~FTX+AAA+++O'BRIEN~"


def test_units_handed_on_as_carved_are_the_same_and_are_not_kept() -> None:
    """With ``on_unit`` every unit is handed over in order and none is kept: a manifest
    of any size holds one unit at a time (the bulk dispatch stores each as it comes)."""
    from tidegate.edi import Intake
    from tidegate.edi.synthetic import synthetic_ifcsum

    data = synthetic_ifcsum(300, seed=5, bl_every=("BM",))
    kept = [u for result in Intake(data) for u in result.units]
    handed: list[Any] = []
    results = list(Intake(data, on_unit=handed.append))
    assert [u.idempotency_key for u in handed] == [u.idempotency_key for u in kept]
    assert len(handed) == 300
    assert all(result.units == () for result in results)
    assert not [f for r in results for f in r.findings if f.code.name == "NO_CONSIGNMENTS"]


def test_carving_a_large_manifest_holds_a_unit_not_the_manifest() -> None:
    """Peak memory while carving 1,000 and then 4,000 consignments (tracemalloc, same
    run): kept, the units grow with the manifest; handed on, they do not."""
    import tracemalloc

    from tidegate.edi import Intake
    from tidegate.edi.synthetic import synthetic_ifcsum

    def peak(consignments: int, **kwargs: Any) -> int:
        data = synthetic_ifcsum(consignments, seed=6, bl_every=("BM",))
        chunks = [data[i : i + 65_536] for i in range(0, len(data), 65_536)]
        tracemalloc.start()
        try:
            for _ in Intake(iter(chunks), **kwargs):
                pass
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def drop(unit: Any) -> None:
        del unit

    kept = peak(4_000) - peak(1_000)
    streamed = peak(4_000, on_unit=drop) - peak(1_000, on_unit=drop)
    assert kept > 3_000_000, f"keeping 3,000 more units took only {kept} B"
    assert streamed < kept / 10, f"streamed grew {streamed} B, kept grew {kept} B"
