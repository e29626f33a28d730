"""ISO 6346 container numbers and UN/LOCODE shapes."""

from __future__ import annotations

import pytest

from tidegate.edi import FindingCode, check_container, check_locode, iso6346_check_digit
from tidegate.edi.validate import is_locode, is_valid_container


@pytest.mark.parametrize(
    ("prefix", "digit"),
    [("CSQU305438", 3), ("MSCU123456", 6), ("CBHU123456", 1), ("SUDU123456", 9)],
)
def test_check_digit(prefix: str, digit: int) -> None:
    """The ISO 6346 check digit (CSQU3054383 is the standard's own example)."""
    assert iso6346_check_digit(prefix) == digit


def test_check_digit_refuses_malformed_prefixes() -> None:
    """The digit is only defined for 4 letters and 6 digits."""
    with pytest.raises(ValueError, match="four capital letters"):
        iso6346_check_digit("CSQ305438")


@pytest.mark.parametrize(
    ("number", "valid", "problems"),
    [
        ("CSQU3054383", True, []),
        ("CSQU 305438 3", True, [FindingCode.CONTAINER_SPACE]),
        (" CSQU3054383", True, [FindingCode.CONTAINER_SPACE]),
        ("CBHU1234567", False, [FindingCode.CONTAINER_CHECK_DIGIT]),
        ("CBHU 1234567", False, [FindingCode.CONTAINER_SPACE, FindingCode.CONTAINER_CHECK_DIGIT]),
        ("CSQX3054383", False, [FindingCode.CONTAINER_FORMAT]),
        ("csqu3054383", False, [FindingCode.CONTAINER_FORMAT]),
        ("CSQU305438", False, [FindingCode.CONTAINER_FORMAT]),
        ("CSQU３054383", False, [FindingCode.CONTAINER_FORMAT]),
        ("", False, [FindingCode.CONTAINER_MISSING]),
    ],
)
def test_container_numbers(number: str, valid: bool, problems: list[FindingCode]) -> None:
    """Owner code, category letter (U/J/Z), serial, check digit; a space is tolerated."""
    check = check_container(number)
    assert check.valid is valid
    assert [code for code, _ in check.problems] == problems
    assert is_valid_container(number) is (valid and not problems)


def test_category_letter_is_named() -> None:
    """The message says which part is wrong."""
    (problem,) = check_container("CSQX3054383").problems
    assert "'X' is not U, J or Z" in problem[1]


@pytest.mark.parametrize(
    ("code", "valid", "why"),
    [
        ("NLRTM", True, None),
        ("DEHAM", True, None),
        ("US2AB", True, None),
        ("SG", False, "not shaped"),
        ("ROTTERDAM", False, "not shaped"),
        (" AUMEL", False, "whitespace"),
        ("AUME1", False, "not shaped"),
        ("nlrtm", False, "not shaped"),
    ],
)
def test_locode_shape(code: str, valid: bool, why: str | None) -> None:
    """Two letters of country, then three letters or digits 2-9."""
    check = check_locode(code)
    assert check.valid is valid
    assert is_locode(code) is valid
    if why is not None:
        assert check.problem is not None
        assert why in check.problem
