"""How a store lists its records, whichever backend keeps them."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["listed"]

T = TypeVar("T")


def listed(records: Iterable[T | None], limit: int | None) -> Iterator[T]:
    """The records that still exist (``None``: removed between reading the order and
    the record), at most ``limit`` of them (``None``: all; 0 or less: none). Lazy, so a
    listing reads one page at a time and stops reading at its limit."""
    present = (record for record in records if record is not None)
    return itertools.islice(present, None if limit is None else max(0, limit))
