"""Value checks: ISO 6346 container numbers and the shape of UN/LOCODEs.

These functions only judge a value and say why it fails; turning a failure into a
located :class:`~tidegate.edi.Finding` is the caller's job, because only the caller
knows which segment the value came from and what the value belongs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import mul
from typing import NamedTuple

from tidegate.edi.findings import FindingCode

__all__ = [
    "ContainerCheck",
    "LocodeCheck",
    "check_container",
    "check_locode",
    "is_locode",
    "is_valid_container",
    "iso6346_check_digit",
]

_CONTAINER = re.compile(r"[A-Z]{3}[UJZ][0-9]{6}[0-9]\Z")
_CONTAINER_SHAPE = re.compile(r"[A-Z]{4}[0-9]{7}\Z")
_LOCODE = re.compile(r"[A-Z]{2}[A-Z2-9]{3}\Z")


def _letter_values() -> dict[str, int]:
    # ISO 6346 gives A=10 and counts up, skipping multiples of 11 (11, 22, 33) so that
    # no letter is worth the same as the modulus.
    values: dict[str, int] = {}
    value = 10
    for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        if value % 11 == 0:
            value += 1
        values[letter] = value
        value += 1
    values.update({str(d): d for d in range(10)})
    return values


_VALUES = _letter_values()
_WEIGHTS = tuple(1 << position for position in range(10))


def iso6346_check_digit(prefix: str) -> int:
    """The check digit for the first ten characters (owner, category, serial).

    Raises:
        ValueError: ``prefix`` is not four capital letters and six digits.
    """
    if not _CONTAINER_SHAPE.match(prefix + "0"):
        raise ValueError("an ISO 6346 prefix is four capital letters and six digits")
    return _digit(prefix)


def _digit(prefix: str) -> int:
    total: int = sum(map(mul, map(_VALUES.__getitem__, prefix), _WEIGHTS))
    return total % 11 % 10


class ContainerCheck(NamedTuple):
    """The verdict on one container number.

    A named tuple rather than a frozen dataclass: one is built per container, and a
    5,000-consignment manifest should not spend its time in ``object.__setattr__``.

    Args:
        number: the value as sent.
        normalised: the value without whitespace (what the checks were run on).
        valid: owner code, category letter, serial and check digit all correct.
            A number that is valid once its embedded space is removed is valid.
        problems: ``(code, message)`` for every problem found, including the
            tolerated whitespace.
    """

    number: str
    normalised: str
    valid: bool
    problems: tuple[tuple[FindingCode, str], ...] = ()


def is_valid_container(number: str) -> bool:
    """Whether ``number`` is exactly a valid ISO 6346 number (no whitespace tolerated).

    The cheap test for the common case; :func:`check_container` says why not.
    """
    return _CONTAINER.match(number) is not None and int(number[10]) == _digit(number[:10])


def check_container(number: str) -> ContainerCheck:
    """Check ``number`` against ISO 6346.

    Example:
        >>> check_container("CSQU3054383").valid
        True
        >>> check_container("CSQU 305438 3").problems[0][0].value
        'container_space'
    """
    if is_valid_container(number):
        return ContainerCheck(number, number, True)
    problems: list[tuple[FindingCode, str]] = []
    normalised = "".join(number.split())
    if not normalised:
        return ContainerCheck(
            number, "", False, ((FindingCode.CONTAINER_MISSING, "EQD without a number"),)
        )
    if normalised != number:
        problems.append(
            (FindingCode.CONTAINER_SPACE, f"container number {number!r} contains whitespace")
        )
    if not _CONTAINER.match(normalised):  # also rejects non-ASCII digits
        if _CONTAINER_SHAPE.match(normalised):
            reason = f"category letter {normalised[3]!r} is not U, J or Z"
        else:
            reason = "expected 3-letter owner code, category letter, 6 digits, check digit"
        problems.append((FindingCode.CONTAINER_FORMAT, f"container {normalised!r}: {reason}"))
        return ContainerCheck(number, normalised, False, tuple(problems))
    expected = _digit(normalised[:10])
    if int(normalised[10]) != expected:
        problems.append(
            (
                FindingCode.CONTAINER_CHECK_DIGIT,
                f"container {normalised!r}: check digit {normalised[10]} should be {expected}",
            )
        )
        return ContainerCheck(number, normalised, False, tuple(problems))
    return ContainerCheck(number, normalised, True, tuple(problems))


@dataclass(frozen=True, slots=True)
class LocodeCheck:
    """The verdict on one location code: only its shape, not its existence.

    Args:
        code: the value as sent.
        valid: two letters of country then three letters or digits 2-9, exactly.
        problem: why not, when not valid.
    """

    code: str
    valid: bool
    problem: str | None = None


def is_locode(code: str) -> bool:
    """Whether ``code`` is exactly UN/LOCODE-shaped; :func:`check_locode` says why not."""
    return _LOCODE.match(code) is not None


def check_locode(code: str) -> LocodeCheck:
    """Check that ``code`` has the shape of a UN/LOCODE (``NLRTM``, ``DEHAM``).

    Existence is not checked: the code list changes twice a year and a shape check
    already catches the typical faults (a country code alone, stray spaces, a terminal
    code where a port was expected).
    """
    if _LOCODE.match(code):
        return LocodeCheck(code, True)
    if code.strip() != code and _LOCODE.match(code.strip()):
        return LocodeCheck(code, False, f"UN/LOCODE {code!r} has surrounding whitespace")
    return LocodeCheck(code, False, f"{code[:20]!r} is not shaped like a UN/LOCODE")
