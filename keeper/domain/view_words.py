"""A word slicer for view results: the fast path of ``keeper.domain.views.decode_view``.

The indexer decodes one view result per job it indexes, so going through
eth_abi's stream decoders would be its hot spot (bench/README.md). Like
``keeper.domain.events``, this reads 32-byte words at their offsets. It accepts
only encodings whose every value it can check the way eth_abi would (clean
padding, small ints in range, booleans 0 or 1, UTF-8 strings, tails wholly
inside the data) and answers None for anything else, which the caller then
hands to eth_abi: so the slicer never changes what is accepted or what it
decodes to, only how fast the common answer is read.

Supported types: ``address``, ``bool``, ``uintN``, ``bytesN`` (N <= 32),
``string``, and dynamic arrays of a static type or of a tuple of static types,
which is every view in ``keeper.domain.views``; a spec with another type is
never sliced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from keeper.domain.model import ArgValue

__all__ = ["Slicer", "slicer_for"]

_W: Final = 32
_ZERO: Final = bytes(32)

# a static word's reader: the value, or None when eth_abi would refuse it
StaticReader = Callable[[bytes], ArgValue | None]
Slicer = Callable[[bytes], dict[str, ArgValue] | None]


def _address(w: bytes) -> ArgValue | None:
    return "0x" + w[12:].hex() if w[:12] == _ZERO[:12] else None


def _bool(w: bytes) -> ArgValue | None:
    if w[:31] != _ZERO[:31] or w[31] > 1:
        return None
    return w[31] == 1


def _uint(bits: int) -> StaticReader:
    limit = 1 << bits

    def read(w: bytes) -> ArgValue | None:
        v = int.from_bytes(w, "big")
        return v if v < limit else None

    return read


def _fixed_bytes(size: int) -> StaticReader:
    pad = bytes(_W - size)

    def read(w: bytes) -> ArgValue | None:
        return "0x" + w[:size].hex() if w[size:] == pad else None

    return read


def _static_reader(typ: str) -> StaticReader | None:
    if typ == "address":
        return _address
    if typ == "bool":
        return _bool
    if typ.startswith("uint") and typ[4:].isdigit():
        bits = int(typ[4:])
        return _uint(bits) if 0 < bits <= 256 and bits % 8 == 0 else None
    if typ.startswith("bytes") and typ[5:].isdigit():
        size = int(typ[5:])
        return _fixed_bytes(size) if 0 < size <= _W else None
    return None


# a dynamic value's reader, given the data and the tail's start: None to refuse
TailReader = Callable[[bytes, int], ArgValue | None]


def _string(data: bytes, at: int) -> ArgValue | None:
    if at + _W > len(data):
        return None
    length = int.from_bytes(data[at : at + _W], "big")
    start = at + _W
    end = start + length
    padded = start + (length + _W - 1) // _W * _W
    if padded > len(data) or any(data[end:padded]):
        return None
    try:
        return data[start:end].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _array(items: Sequence[StaticReader], as_tuple: bool) -> TailReader:
    """``T[]`` of a static T: inline elements of ``len(items)`` words each."""
    size = len(items) * _W

    def read(data: bytes, at: int) -> ArgValue | None:
        if at + _W > len(data):
            return None
        n = int.from_bytes(data[at : at + _W], "big")
        start = at + _W
        if start + n * size > len(data):
            return None
        out: list[ArgValue] = []
        for k in range(n):
            base = start + k * size
            parts: list[ArgValue] = []
            for j, reader in enumerate(items):
                v = reader(data[base + j * _W : base + (j + 1) * _W])
                if v is None:
                    return None
                parts.append(v)
            out.append(tuple(parts) if as_tuple else parts[0])
        return tuple(out)

    return read


def _tail_reader(typ: str) -> TailReader | None:
    if typ == "string":
        return _string
    if not typ.endswith("[]") or typ.count("[") != 1:
        return None
    inner = typ[:-2]
    if inner.startswith("(") and inner.endswith(")"):
        readers = [_static_reader(t) for t in inner[1:-1].split(",")]
        if any(r is None for r in readers) or "(" in inner[1:]:
            return None
        return _array([r for r in readers if r is not None], True)
    reader = _static_reader(inner)
    return _array([reader], False) if reader is not None else None


def slicer_for(outputs: Sequence[tuple[str, str]]) -> Slicer | None:
    """The slicer of a view returning ``outputs`` as one tuple; None if a type is unsupported."""
    fields: list[tuple[str, StaticReader | None, TailReader | None]] = []
    for name, typ in outputs:
        static = _static_reader(typ)
        tail = None if static is not None else _tail_reader(typ)
        if static is None and tail is None:
            return None
        fields.append((name, static, tail))
    dynamic = any(tail is not None for _, _, tail in fields)
    head = len(fields) * _W

    def slice_words(data: bytes) -> dict[str, ArgValue] | None:
        base = 0
        if dynamic:  # the returned tuple is itself a tail, at offset 32 in the canonical form
            if len(data) < _W or data[:_W] != _ZERO[:31] + b"\x20":
                return None
            base = _W
        if len(data) < base + head:
            return None
        out: dict[str, ArgValue] = {}
        for i, (name, static, tail) in enumerate(fields):
            word = data[base + i * _W : base + (i + 1) * _W]
            if static is not None:
                value = static(word)
            else:
                offset = int.from_bytes(word, "big")
                if offset < head or offset % _W or base + offset >= len(data):
                    return None
                assert tail is not None
                value = tail(data, base + offset)
            if value is None:
                return None
            out[name] = value
        return out

    return slice_words
