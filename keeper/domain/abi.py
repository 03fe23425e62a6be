"""ABI encoding and decoding: the call shapes the keeper sends by hand, eth_abi for the rest.

The indexer decodes events, view results and Multicall3 answers with its
own readers (keeper.domain.events, view_words, multicall) and reaches
eth_abi only for a shape they decline. The same holds for encoding: the
keeper's calls and dialect probes take elementary arguments (integers,
addresses, booleans, fixed and dynamic bytes, strings), written here; an
array, a tuple or a value this encoder does not take exactly as it is goes
to eth_abi, which encodes it or raises, so what is accepted stays eth_abi's
decision. Importing eth_abi brings eth_utils and pydantic, a large share of a
daemon's memory and start-up (bench/README.md), which a daemon that never
needs it need not pay.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["decode", "encode", "padded", "split_types", "word"]

_ELEMENTARY = re.compile(r"(u?int)(\d*)|address|bool|bytes(\d*)|string")
_ADDRESS = re.compile(r"0x[0-9a-f]{40}")


def decode(types: Sequence[str], data: bytes, *, strict: bool = True) -> tuple[Any, ...]:
    from eth_abi.abi import decode as eth_decode

    return tuple(eth_decode(types, data, strict=strict))


def encode(types: Sequence[str], values: Sequence[Any]) -> bytes:
    """The ABI encoding of ``values`` as a tuple of ``types`` (no selector)."""
    encoded = _encode_elementary(types, values)
    if encoded is not None:
        return encoded
    from eth_abi.abi import encode as eth_encode

    return bytes(eth_encode(types, values))


def split_types(params: str) -> list[str]:
    """A parameter list split at its top-level commas, so a tuple type stays whole:
    ``"uint256,(address,bytes4[])[]"`` is two types."""
    out, depth, current = [], 0, ""
    for ch in params:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += ch
    return [*out, current] if current else out


def word(value: int) -> bytes:
    """One 32-byte word: an integer, two's complement when negative."""
    return value.to_bytes(32, "big", signed=value < 0)


def padded(data: bytes) -> bytes:
    """A dynamic ``bytes`` value's tail: its length, then the data padded to whole words."""
    return word(len(data)) + data + bytes(-len(data) % 32)


def _static_word(typ: str, value: Any) -> bytes | None:
    """The head word of one static elementary value, or None to leave it to eth_abi."""
    match = _ELEMENTARY.fullmatch(typ)
    if match is None:
        return None
    kind, bits, size = match.group(1), match.group(2), match.group(3)
    if kind is not None:
        width = int(bits) if bits else 256
        if type(value) is not int or width % 8 or not 8 <= width <= 256:
            return None
        low, high = (0, 1 << width) if kind == "uint" else (-(1 << width - 1), 1 << width - 1)
        if not low <= value < high:
            return None
        return word(value)
    if typ == "address":
        if type(value) is not str or not _ADDRESS.fullmatch(value):
            return None  # eth_abi's rules for checksummed or mixed case are its own
        return bytes(12) + bytes.fromhex(value[2:])
    if typ == "bool":
        return None if type(value) is not bool else word(int(value))
    if size:  # bytesN
        n = int(size)
        if type(value) is not bytes or not 1 <= n <= 32 or len(value) > n:
            return None
        return value + bytes(32 - len(value))
    return None


def _encode_elementary(types: Sequence[str], values: Sequence[Any]) -> bytes | None:
    if len(types) != len(values):
        return None
    heads: list[bytes] = []
    tails: list[bytes] = []
    at = 32 * len(types)
    for typ, value in zip(types, values, strict=True):
        if typ in ("bytes", "string"):
            if typ == "bytes" and type(value) is bytes:
                tail = padded(value)
            elif typ == "string" and type(value) is str:
                tail = padded(value.encode("utf-8"))
            else:
                return None
            heads.append(word(at))
            tails.append(tail)
            at += len(tail)
            continue
        head = _static_word(typ, value)
        if head is None:
            return None
        heads.append(head)
    return b"".join(heads + tails)
