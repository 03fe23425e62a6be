"""Multicall3 ``aggregate3`` calldata and results, written and read by hand.

One codec for every part that batches calls: the keeper's simulations and
sends (a thousand refunds are twenty batches encoded several times a tick)
and the indexer's view reads (hundreds of ``getJob`` reads a call). Pure, no
provider; checked against eth_abi with hypothesis in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from keeper.domain.abi import decode, padded, word
from keeper.domain.dialects import selector

__all__ = ["MULTICALL3_ADDRESS", "Call3Result", "decode_aggregate3", "encode_aggregate3"]

# The same address on every chain that has Multicall3 (deterministic deployment).
MULTICALL3_ADDRESS: Final = "0xca11bde05977b3631167028862be2a173976ca11"


_AGGREGATE3: Final = selector("aggregate3((address,bool,bytes)[])")


def encode_aggregate3(calls: Sequence[tuple[str, bytes]], *, allow_failure: bool = True) -> bytes:
    """Multicall3 ``aggregate3``, by default with ``allowFailure`` on every call.

    Sent with ``allowFailure``: one subject preempted by another keeper
    between simulation and inclusion must not undo the others. Estimated
    without it: with ``allowFailure`` a gas estimate is satisfied by a limit at
    which the inner calls run out of gas and fail quietly.
    """
    flag = word(1 if allow_failure else 0)
    heads: list[bytes] = []
    tails: list[bytes] = []
    at = 32 * len(calls)  # tuple offsets count from the first head, after the length
    for target, data in calls:
        address = bytes.fromhex(target.removeprefix("0x"))
        if len(address) != 20:
            raise ValueError(f"aggregate3: {target!r} is not a 20-byte address")
        tail = b"".join((bytes(12), address, flag, word(96), padded(data)))
        heads.append(word(at))
        tails.append(tail)
        at += len(tail)
    return b"".join((_AGGREGATE3, word(32), word(len(calls)), *heads, *tails))


@dataclass(frozen=True, slots=True)
class Call3Result:
    success: bool
    return_data: bytes


def decode_aggregate3(data: bytes) -> list[Call3Result]:
    """The per-call results of an ``aggregate3`` eth_call.

    The canonical encoding every Multicall3 returns is sliced by hand; anything
    else goes to eth_abi, which decodes it or raises, so what is accepted is
    eth_abi's decision either way.
    """
    fast = _canonical_results(data)
    if fast is not None:
        return fast
    (results,) = decode(["(bool,bytes)[]"], data)
    return [Call3Result(bool(ok), bytes(ret)) for ok, ret in results]


def _canonical_results(data: bytes) -> list[Call3Result] | None:
    """``(bool,bytes)[]`` laid out as a Solidity encoder writes it, else None."""
    if len(data) < 64 or int.from_bytes(data[:32], "big") != 32 or len(data) % 32:
        return None
    count = int.from_bytes(data[32:64], "big")
    base = 64  # offsets count from here
    if count > (len(data) - base) // 32:
        return None
    out: list[Call3Result] = []
    expected = base + 32 * count
    for i in range(count):
        start = base + int.from_bytes(data[base + 32 * i : base + 32 * (i + 1)], "big")
        if start != expected or start + 96 > len(data):
            return None
        flag = int.from_bytes(data[start : start + 32], "big")
        if flag > 1 or int.from_bytes(data[start + 32 : start + 64], "big") != 64:
            return None
        size = int.from_bytes(data[start + 64 : start + 96], "big")
        end = start + 96 + size
        padded = end + (-size % 32)
        if padded > len(data) or any(data[end:padded]):
            return None
        out.append(Call3Result(flag == 1, data[start + 96 : end]))
        expected = padded
    return out if expected == len(data) else None
