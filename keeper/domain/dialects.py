"""Protocol dialects as data: the call shapes, custom errors and probes of each deployment.

A *dialect* is one published interface of an escrow protocol as far as the keeper is
concerned: which function signature each keeper action calls (and where each argument
comes from), and which signatures a contract must (and must not) answer to be that
dialect. Each protocol has one ``ProtocolTable`` (``keeper.domain.dialects_taskmarket``,
``keeper.domain.dialects_erc8183``) listing its dialects, its event shapes (by topic0,
from ``keeper.domain.event_catalog``) and its custom errors by selector with an outcome class,
so a reviewer can hold one table against upstream instead of chasing branches through
the code. ``keeper.domain.protocols`` holds the registry of both.

Pure: ABI encoding with eth_abi, no provider. Detection (the I/O) is
``keeper.act.detect``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from keeper.domain.abi import decode, encode, split_types
from keeper.domain.event_catalog import SPECS, EventSpec
from keeper.domain.hashing import keccak
from keeper.domain.model import Protocol
from keeper.domain.planner import Action, ActionKind

__all__ = [
    "CONST",
    "SUBJECT",
    "Arg",
    "CallShape",
    "Dialect",
    "ErrorClass",
    "ErrorRule",
    "ProtocolTable",
    "arg_types",
    "probe_calldata",
    "selector",
]

SUBJECT: Final = "subject"  # the job id (uint256) or task id (bytes32) the action is about
CONST: Final = "const"  # a fixed value; ``Arg.why`` says why that value is right


def selector(signature: str) -> bytes:
    """The 4-byte selector of a function or custom error signature."""
    return keccak(text=signature)[:4]


def arg_types(signature: str) -> tuple[str, ...]:
    """The parameter types of a signature (a tuple parameter is one type)."""
    return tuple(split_types(signature[signature.index("(") + 1 : -1]))


class ErrorClass(StrEnum):
    """What a revert means for the keeper's intent.

    ``preempted``: the subject left the state the planner saw (someone acted first);
    ``not_permitted``: final for this keeper's key (permission, or the selector is not
    routed); ``not_yet_due``: a deadline has not passed on chain yet; ``paused``: the
    contract refuses everything for now; ``other``: anything else, decoded for the record.
    """

    PREEMPTED = "preempted"
    NOT_PERMITTED = "not_permitted"
    NOT_YET_DUE = "not_yet_due"
    PAUSED = "paused"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a keeper call: the subject, or a constant with the reason for it."""

    source: str
    value: object = None
    why: str = ""

    def __post_init__(self) -> None:
        if self.source not in (SUBJECT, CONST):
            raise ValueError(f"unknown argument source {self.source!r}")


@dataclass(frozen=True, slots=True)
class CallShape:
    """How one keeper action is called on one dialect."""

    signature: str
    args: tuple[Arg, ...]
    permission: str = "anyone"
    selector: bytes = field(init=False)
    types: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        types = arg_types(self.signature)
        if len(types) != len(self.args):
            raise ValueError(f"{self.signature}: {len(self.args)} argument sources given")
        if [a.source for a in self.args].count(SUBJECT) != 1:
            raise ValueError(f"{self.signature}: exactly one argument must be the subject")
        object.__setattr__(self, "selector", selector(self.signature))
        object.__setattr__(self, "types", types)

    def encode(self, subject: str) -> bytes:
        """Calldata for this call about ``subject`` (decimal job id or ``0x`` task id).

        Memoised: a due action is encoded at each gate, estimate and send of a
        tick, and again on every tick until it lands.
        """
        return _encode_call(self, subject)


@functools.lru_cache(maxsize=8192)
def _encode_call(shape: CallShape, subject: str) -> bytes:
    values = [
        _subject_value(typ, subject) if a.source == SUBJECT else a.value
        for typ, a in zip(shape.types, shape.args, strict=True)
    ]
    return shape.selector + encode(list(shape.types), values)


def _subject_value(typ: str, subject: str) -> object:
    if typ == "bytes32":
        raw = bytes.fromhex(subject.removeprefix("0x"))
        if len(raw) != 32:
            raise ValueError("a task id is 32 bytes")
        return raw
    if typ == "uint256":
        return int(subject)
    raise ValueError(f"a subject cannot be encoded as {typ}")


@dataclass(frozen=True, slots=True)
class Dialect:
    """One published call interface of a protocol.

    ``requires``: signatures the contract must answer; ``lacks``: signatures it must not
    (how two dialects that share most of their functions are told apart). On a diamond
    "answers" means the loupe routes the selector; on a plain contract, an ``eth_call``
    probe with an id that cannot exist reverts with data (a custom error) or succeeds,
    where an unknown selector reverts empty.
    """

    name: str
    protocol: Protocol
    revisions: str
    calls: Mapping[ActionKind, CallShape]
    requires: tuple[str, ...]
    lacks: tuple[str, ...] = ()
    note: str = ""

    def call(self, kind: ActionKind) -> CallShape | None:
        return self.calls.get(kind)

    def encode(self, action: Action) -> bytes:
        """Calldata for ``action`` in this dialect (KeyError: the dialect has no such call)."""
        shape = self.calls.get(action.action)
        if shape is None:
            raise KeyError(f"dialect {self.name} has no {action.action.value} call")
        return shape.encode(action.subject)


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """A custom error by selector, what it means for the keeper, and where it comes from."""

    signature: str
    klass: ErrorClass
    why: str = ""
    selector: bytes = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "selector", selector(self.signature))


_ERROR_STRING: Final = selector("Error(string)")
# an elementary type with its width (uint8..uint256, int8..int256, bytes1..bytes32)
_SIZED: Final = re.compile(r"(u?int|bytes)([1-9]\d*)")


@dataclass(frozen=True, slots=True)
class ProtocolTable:
    """Everything version-dependent about one protocol, in one place."""

    protocol: Protocol
    dialects: tuple[Dialect, ...]  # detection order: the first one that matches wins
    errors: tuple[ErrorRule, ...]
    # Error(string) reasons with a fixed meaning (a diamond's "function not found")
    error_strings: Mapping[str, ErrorClass] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [d.name for d in self.dialects]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.protocol}: two dialects share a name")
        sels = [e.selector for e in self.errors]
        if len(set(sels)) != len(sels):
            raise ValueError(f"{self.protocol}: two error rules share a selector")
        if any(d.protocol is not self.protocol for d in self.dialects):
            raise ValueError(f"{self.protocol}: a dialect of another protocol is listed")

    @property
    def events(self) -> tuple[EventSpec, ...]:
        """Every event shape of this protocol, all revisions (decoded by topic0)."""
        return tuple(s for s in SPECS if s.protocol is self.protocol)

    def dialect(self, name: str) -> Dialect:
        for d in self.dialects:
            if d.name == name:
                return d
        known = ", ".join(d.name for d in self.dialects)
        raise KeyError(f"unknown {self.protocol.value} dialect {name!r} (known: {known})")

    def classify(self, data: bytes | None) -> tuple[ErrorClass, str] | None:
        """The class and name of a revert this table knows, or None."""
        head = (data or b"")[:4]
        for rule in self.errors:
            if rule.selector == head:
                return rule.klass, rule.signature
        if head == _ERROR_STRING and data is not None:
            try:
                (text,) = decode(["string"], data[4:])
            except Exception:  # malformed payload: not a known message
                return None
            klass = self.error_strings.get(str(text))
            if klass is not None:
                return klass, f"Error({str(text)!r})"
        return None


def probe_calldata(signature: str) -> bytes:
    """Calldata for a detection probe: an id that cannot exist, every other argument zero.

    The first argument (the job or task id in every probed function) is all ones, so a
    function that exists reverts with its "not found" / wrong-state error and nothing it
    could do would matter anyway: ``eth_call`` never changes state.
    """
    types = arg_types(signature)
    values: list[object] = []
    for i, typ in enumerate(types):
        first = i == 0
        sized = _SIZED.fullmatch(typ)
        kind, size = (sized.group(1), int(sized.group(2))) if sized else (typ, 0)
        if kind == "uint":
            values.append((1 << size) - 1 if first else 0)
        elif kind == "int":
            values.append(0)
        elif kind == "address":
            values.append("0x" + "00" * 20)
        elif kind == "bool":
            values.append(False)
        elif kind == "bytes" and not size:
            values.append(b"")
        elif kind == "string":
            values.append("")
        elif kind == "bytes":
            values.append((b"\xff" if first else b"\x00") * size)
        else:
            raise ValueError(f"{signature}: cannot probe a {typ} argument")
    return selector(signature) + encode(list(types), values)
