"""Multicall3 calldata, subject words, and what a revert means.

The keeper's own calls are encoded by their contract's dialect (``keeper.domain.dialects``).

Pure: ABI encoding and 4-byte selectors, no web3 provider; the Multicall3
payloads are written and read by hand (a thousand refunds are twenty batches
encoded several times a tick), checked against eth_abi in the tests. The
revert classifier decides the outcome of a simulation by the custom error's
selector, never by message text, because nodes word reverts differently but
always return the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from eth_abi.abi import decode

from keeper.domain.dialects import ErrorClass, selector
from keeper.domain.model import Protocol
from keeper.domain.protocols import classify_error

__all__ = [
    "MULTICALL3_ADDRESS",
    "Call3Result",
    "SimVerdict",
    "classify_revert",
    "decode_aggregate3",
    "decode_revert",
    "encode_aggregate3",
    "selector",
    "subject_topic",
]

# The same address on every chain that has Multicall3 (deterministic deployment).
MULTICALL3_ADDRESS: Final = "0xca11bde05977b3631167028862be2a173976ca11"


_AGGREGATE3: Final = selector("aggregate3((address,bool,bytes)[])")


def subject_word(subject: str) -> bytes:
    """The 32-byte ABI word of a subject id: decimal job ids and 0x task ids alike."""
    if subject.startswith("0x"):
        raw = bytes.fromhex(subject[2:])
        if len(raw) != 32:
            raise ValueError("a task id is 32 bytes")
        return raw
    return int(subject).to_bytes(32, "big")


def subject_topic(subject: str) -> str:
    """The subject as the lowercase hex topic it appears as in an event's first indexed slot."""
    return "0x" + subject_word(subject).hex()


def encode_aggregate3(calls: Sequence[tuple[str, bytes]], *, allow_failure: bool = True) -> bytes:
    """Multicall3 ``aggregate3``, by default with ``allowFailure`` on every call.

    Sent with ``allowFailure``: one subject preempted by another keeper
    between simulation and inclusion must not undo the others. Estimated
    without it: with ``allowFailure`` a gas estimate is satisfied by a limit at
    which the inner calls run out of gas and fail quietly.
    """
    flag = _word(1 if allow_failure else 0)
    heads: list[bytes] = []
    tails: list[bytes] = []
    at = 32 * len(calls)  # tuple offsets count from the first head, after the length
    for target, data in calls:
        address = bytes.fromhex(target.removeprefix("0x"))
        if len(address) != 20:
            raise ValueError(f"aggregate3: {target!r} is not a 20-byte address")
        tail = b"".join(
            (bytes(12), address, flag, _word(96), _word(len(data)), data, bytes(-len(data) % 32))
        )
        heads.append(_word(at))
        tails.append(tail)
        at += len(tail)
    return b"".join((_AGGREGATE3, _word(32), _word(len(calls)), *heads, *tails))


def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


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


_ERROR_STRING: Final = selector("Error(string)")
_PANIC: Final = selector("Panic(uint256)")

SimVerdict: TypeAlias = Literal["ok", "preempted", "not_permitted", "reverted_in_simulation"]

# Error classes that end an intent for good; every other class (not yet due, paused,
# other) is ``reverted_in_simulation``, decided again once redecide_after_blocks pass.
_FINAL: Final[dict[ErrorClass, SimVerdict]] = {
    ErrorClass.PREEMPTED: "preempted",
    ErrorClass.NOT_PERMITTED: "not_permitted",
}


def decode_revert(data: bytes | None, protocol: Protocol | None = None) -> str:
    """A short human reason for revert bytes: custom error name, Error(string), Panic code."""
    if not data:
        return "reverted without data"
    head, body = data[:4], data[4:]
    known = classify_error(data, protocol)
    if known is not None:
        return known[1]
    try:
        if head == _ERROR_STRING:
            (text,) = decode(["string"], body)
            return f"Error({str(text)[:200]!r})"
        if head == _PANIC:
            (code,) = decode(["uint256"], body)
            return f"Panic(0x{int(code):02x})"
    except Exception:  # malformed payload: fall through to the raw selector
        pass
    return f"unknown error 0x{head.hex()}"


def classify_revert(data: bytes | None, protocol: Protocol | None = None) -> tuple[SimVerdict, str]:
    """What a simulation revert means for the intent, and the decoded reason.

    Classified by selector against the protocol tables (``protocol``'s first), never by
    message text; the reason names the error class when it is not final, so an operator
    sees "not yet due" or "paused" apart from a genuine failure.
    """
    known = classify_error(data, protocol)
    if known is None:
        return "reverted_in_simulation", decode_revert(data, protocol)
    klass, name = known
    final = _FINAL.get(klass)
    if final is not None:
        return final, name
    return "reverted_in_simulation", f"{name} ({klass.value})"
