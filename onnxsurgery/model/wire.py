"""Protobuf's wire format read directly: where each field of a serialized message lies.

Parsing a message copies every bytes field into it; a reader that only needs to know *where* a
field's bytes are (a tensor's ``raw_data`` in a ``.pb`` file or in an ``.onnx`` model) walks the
fields instead (:func:`fields`) and copies nothing. Malformed bytes raise ``ValueError``: the
caller then leaves the bytes to protobuf's own parser, which has the last word.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import overload

__all__ = ["Buffer", "FileBytes", "fields", "len_field", "varint", "varint_bytes"]


class FileBytes:
    """An open file's bytes, read only where they are looked at (``os.pread``, one block at a
    time for single bytes, exactly the span for a slice): a walk with :func:`fields` over a
    model whose weights are stored inline reads its tags and lengths, not the weights it steps
    over. Indexing gives an int, slicing (step 1) bytes, as ``bytes`` does. The file is read as
    it is at each look: one that ends early (cut while being read) raises ValueError, as
    malformed bytes do."""

    #: Bytes read around a single byte looked at: the fields that follow are usually there.
    BLOCK = 1 << 14

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._size = fd, size
        self._block_at = -1
        self._block = b""

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> bytes: ...
    def __getitem__(self, index: int | slice) -> int | bytes:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._size)
            if step != 1:
                raise ValueError("FileBytes slices step 1")
            return self._read(start, max(start, stop))
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("FileBytes index out of range")
        at = index - index % self.BLOCK
        if at != self._block_at:
            self._block = self._read(at, min(self._size, at + self.BLOCK))
            self._block_at = at
        return self._block[index - at]

    def _read(self, start: int, stop: int) -> bytes:
        if stop - start <= 0:
            return b""
        parts = []
        while start < stop:
            got = os.pread(self._fd, stop - start, start)
            if not got:
                raise ValueError(f"the file ended at byte {start} of {self._size}")
            parts.append(got)
            start += len(got)
        return parts[0] if len(parts) == 1 else b"".join(parts)


#: What the readers here read: bytes in memory, or a file's read as looked at.
Buffer = bytes | memoryview | FileBytes


def varint(data: Buffer, pos: int) -> tuple[int, int]:
    """The varint at ``pos``: (its value, the position after it)."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(
    data: Buffer, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, int, int, int, int]]:
    """Each field of the message in ``data[start:end]``, in order, as (field number, wire type,
    start of its tag, start of its value, end of its value, the value of a varint or the length
    of a length-delimited field). Groups (wire types 3 and 4, unused by ONNX) and anything
    running past ``end`` raise ValueError."""
    end = len(data) if end is None else end
    pos = start
    while pos < end:
        tag_at = pos
        tag, pos = varint(data, pos)
        wire, number = tag & 7, tag >> 3
        at = pos
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 1:
            value, pos = 0, pos + 8
        elif wire == 5:
            value, pos = 0, pos + 4
        elif wire == 2:
            value, at = varint(data, pos)
            pos = at + value
        else:
            raise ValueError(f"wire type {wire} at byte {tag_at}")
        if pos > end or number == 0:
            raise ValueError(f"field at byte {tag_at} runs past its message")
        yield number, wire, tag_at, at, pos, value


def varint_bytes(value: int) -> bytes:
    """``value`` (>= 0) encoded as a varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field ``number`` holding ``payload``, tag and length included."""
    return varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload
