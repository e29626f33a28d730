"""Read EDIFACT from files in bounded chunks, translating I/O errors once.

The tokenizer takes any iterable of bytes; this is the one place that opens files, so
an ``OSError`` becomes :class:`~tidegate.edi.errors.UnreadableInput` here and nowhere
else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from tidegate.edi.errors import UnreadableInput

__all__ = ["DEFAULT_CHUNK_SIZE", "read_chunks"]

#: Bytes read per chunk: large enough that the per-chunk cost vanishes, small enough
#: that memory stays flat.
DEFAULT_CHUNK_SIZE = 1 << 16


def read_chunks(
    source: str | os.PathLike[str] | BinaryIO, *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[bytes]:
    """Yield the bytes of a path or binary file object, ``chunk_size`` at a time.

    Raises:
        UnreadableInput: the file cannot be opened or read (the ``OSError`` chained).
    """
    try:
        if isinstance(source, str | os.PathLike):
            with open(source, "rb") as handle:
                yield from iter(lambda: handle.read(chunk_size), b"")
        else:
            yield from iter(lambda: source.read(chunk_size), b"")
    except OSError as exc:
        raise UnreadableInput(f"cannot read {_name(source)}: {exc.strerror or exc}") from exc


def _name(source: object) -> str:
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    return str(getattr(source, "name", "stream"))
