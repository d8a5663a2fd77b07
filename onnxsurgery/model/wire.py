"""Protobuf's wire format read directly: where each field of a serialized message lies.

Parsing a message copies every bytes field into it; a reader that only needs to know *where* a
field's bytes are (a tensor's ``raw_data`` in a ``.pb`` file or in an ``.onnx`` model) walks the
fields instead (:func:`fields`) and copies nothing. Malformed bytes raise ``ValueError``: the
caller then leaves the bytes to protobuf's own parser, which has the last word.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["fields", "len_field", "varint", "varint_bytes"]


def varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
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
    data: bytes | memoryview, start: int = 0, end: int | None = None
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
