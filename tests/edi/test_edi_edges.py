"""Edge inputs (issue #13 item 8): huge counts, escaped terminators, floods of findings.

Each test pins one way a hostile or broken file used to hurt the reader: an untyped
``ValueError``, time quadratic in a segment's length, memory growing with the number of
findings, or a report that depended on how the bytes happened to be chunked.
"""

from __future__ import annotations

from typing import Any

import pytest

from tidegate.edi import (
    FindingCode,
    inspect_source,
)

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
