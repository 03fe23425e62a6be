"""Subject words, and what a revert means.

The keeper's own calls are encoded by their contract's dialect (``keeper.domain.dialects``).

Pure: ABI encoding and 4-byte selectors, no web3 provider; the Multicall3
payloads are ``keeper.domain.multicall``'s. The
revert classifier decides the outcome of a simulation by the custom error's
selector, never by message text, because nodes word reverts differently but
always return the same bytes.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from keeper.domain.abi import decode
from keeper.domain.dialects import ErrorClass, selector
from keeper.domain.model import Protocol
from keeper.domain.protocols import classify_error
from keeper.domain.text import clipped

__all__ = [
    "SimVerdict",
    "classify_revert",
    "decode_revert",
    "selector",
    "subject_topic",
]


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


_ERROR_STRING: Final = selector("Error(string)")
_PANIC: Final = selector("Panic(uint256)")

SimVerdict: TypeAlias = Literal["ok", "preempted", "not_permitted", "reverted_in_simulation"]

# Error classes that end an intent with their own outcome; every other class (not yet
# due, paused, other) is ``reverted_in_simulation``. Only ``not_permitted`` is final: a
# preempted or reverted intent still planned redecide_after_blocks later is decided again
# (keeper.act.manager), so a stale projection costs a simulation, never a lost action.
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
            return f"Error({clipped(repr(str(text)), 200)})"
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
