"""A fast, total decoder of the catalog's logs (``keeper.domain.event_catalog``).

The decoder slices 32-byte ABI words directly instead of going through
eth_abi: the indexer decodes every log it syncs, so this is its hot path. Static
parameters are read at fixed offsets; the one dynamic type the protocols emit
(``bytes``, in ERC8183's ``ClaimSubmitted``) takes a slower path that accepts
only the canonical layout Solidity writes (tails in parameter order, right
after the head, zero-padded). It is *total*: a log we cannot decode exactly
(unknown topic0, wrong number of topics, wrong data length, dirty padding,
out-of-range small ints, a non-canonical tail) becomes an ``unknown`` event,
kept raw and counted, never an exception — a hostile contract must not stop
the indexer.

Value conventions: uint -> int, address -> lowercase ``0x`` + 40 hex,
bytes32 -> ``0x`` + 64 hex, bytes4 -> ``0x`` + 8 hex, bytes -> ``0x`` + hex,
bool -> bool. Contract-level events carry ``subject=None``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from keeper.domain.event_catalog import (
    DYNAMIC_TYPES,
    RECOGNISED,
    RECOGNISED_TOPICS,
    SPECS,
    UNKNOWN,
    EventSpec,
)
from keeper.domain.model import ArgValue, Event, Log, Protocol

__all__ = ["decode_log", "decode_logs", "unknown_event"]

_ZERO12: Final = bytes(12)
_ZERO28: Final = bytes(28)
_ZERO31: Final = bytes(31)
_HEX_ZERO24: Final = "0" * 24
_HEX_ZERO56: Final = "0" * 56


# --- word decoders -------------------------------------------------------------
# Each returns the value, or None when the word is not a valid encoding of the
# type (dirty padding, out of range). Two flavours: topics arrive as hex
# strings, data words as bytes.


def _topic_uint(t: str) -> ArgValue | None:
    return int(t, 16)


def _topic_address(t: str) -> ArgValue | None:
    return "0x" + t[26:] if t[2:26] == _HEX_ZERO24 else None


def _topic_bytes32(t: str) -> ArgValue | None:
    return t


def _topic_bytes4(t: str) -> ArgValue | None:
    return t[:10] if t[10:] == _HEX_ZERO56 else None


def _word_uint(w: bytes) -> ArgValue | None:
    return int.from_bytes(w, "big")


def _word_address(w: bytes) -> ArgValue | None:
    return "0x" + w[12:].hex() if w[:12] == _ZERO12 else None


def _word_bytes32(w: bytes) -> ArgValue | None:
    return "0x" + w.hex()


def _word_bytes4(w: bytes) -> ArgValue | None:
    return "0x" + w[:4].hex() if w[4:] == _ZERO28 else None


def _word_small(bits: int) -> Callable[[bytes], ArgValue | None]:
    limit = 1 << bits

    def dec(w: bytes) -> ArgValue | None:
        v = int.from_bytes(w, "big")
        return v if v < limit else None

    return dec


def _word_bool(w: bytes) -> ArgValue | None:
    return bool(w[31]) if w[:31] == _ZERO31 and w[31] < 2 else None


_TOPIC_DECODERS: Final[dict[str, Callable[[str], ArgValue | None]]] = {
    "uint256": _topic_uint,
    "address": _topic_address,
    "bytes32": _topic_bytes32,
    "bytes4": _topic_bytes4,
}
_WORD_DECODERS: Final[dict[str, Callable[[bytes], ArgValue | None]]] = {
    "uint256": _word_uint,
    "uint64": _word_small(64),
    "uint48": _word_small(48),
    "uint32": _word_small(32),
    "uint16": _word_small(16),
    "uint8": _word_small(8),
    "address": _word_address,
    "bytes32": _word_bytes32,
    "bytes4": _word_bytes4,
    "bool": _word_bool,
}

# Per spec, the precompiled plan: (name, decoder, topic index or data offset, from_topic).
_Plan = tuple[tuple[str, Callable[..., ArgValue | None], int, bool], ...]


def _plan(spec: EventSpec) -> _Plan:
    steps: list[tuple[str, Callable[..., ArgValue | None], int, bool]] = []
    topic_ix, offset = 1, 0
    for name, typ, indexed in spec.inputs:
        if indexed:
            steps.append((name, _TOPIC_DECODERS[typ], topic_ix, True))
            topic_ix += 1
        else:
            # a dynamic parameter's head word is its tail's offset, resolved by _resolve_tails
            dec = _word_uint if typ in DYNAMIC_TYPES else _WORD_DECODERS[typ]
            steps.append((name, dec, offset, False))
            offset += 32
    return tuple(steps)


def _resolve_tails(spec: EventSpec, args: dict[str, ArgValue], data: bytes) -> bool:
    """Replace each ``bytes`` parameter's offset by its value; False unless canonical.

    Canonical is what Solidity writes: each tail starts where the previous one
    ends (the first right after the head), its length word is followed by the
    bytes zero-padded to a word, and the last tail ends the data.
    """
    tail = spec.data_len
    size = len(data)
    for name, typ, indexed in spec.inputs:
        if indexed or typ not in DYNAMIC_TYPES:
            continue
        if args[name] != tail or tail + 32 > size:
            return False
        length = int.from_bytes(data[tail : tail + 32], "big")
        start = tail + 32
        end = start + length
        padded = start + (length + 31) // 32 * 32
        if padded > size or any(data[end:padded]):
            return False
        args[name] = "0x" + data[start:end].hex()
        tail = padded
    return tail == size


# Nearly every topic0 has one layout: its plan is found by topic0, in one lookup on the
# hot path. The few deployed with different parameters indexed (``event_catalog.EVENTS``)
# are not in _PLANS: theirs are found by their number of topics too, looked up only once
# _PLANS has missed, so the common case pays nothing for them.
_LAYOUTS: Final = Counter((s.protocol, s.topic0) for s in SPECS)
_PLANS: Final[dict[tuple[Protocol, str], tuple[EventSpec, _Plan]]] = {
    (s.protocol, s.topic0): (s, _plan(s)) for s in SPECS if _LAYOUTS[s.protocol, s.topic0] == 1
}
_PLANS_BY_TOPIC_COUNT: Final[dict[tuple[Protocol, str, int], tuple[EventSpec, _Plan]]] = {
    (s.protocol, s.topic0, s.n_topics): (s, _plan(s))
    for s in SPECS
    if _LAYOUTS[s.protocol, s.topic0] > 1
}
# Every topic is 0x + 64 hex digits; checked on the joined tuple in one regex
# pass (a per-character check costs more than the rest of the decode).
_TOPICS_RE: Final = re.compile(r"0x[0-9a-f]{64}(?:\x000x[0-9a-f]{64})*", re.IGNORECASE)


def unknown_event(log: Log, protocol: Protocol, block_timestamp: int) -> Event:
    """The raw, undecoded form of a log: kept and counted, never dropped."""
    return Event(
        contract=log.address,
        protocol=protocol,
        name=None,
        variant=UNKNOWN,
        subject=None,
        args={},
        log=log,
        block_timestamp=block_timestamp,
    )


def _all_checked(topics: tuple[str, ...], checked: set[str]) -> bool:
    """Whether every topic is one already found well-formed and lowercase (none: False)."""
    if not topics:
        return False
    try:
        for t in topics:
            if t not in checked:
                return False
    except TypeError:  # an unhashable topic: the full check refuses it
        return False
    return True


def decode_log(
    log: Log, protocol: Protocol, block_timestamp: int, checked: set[str] | None = None
) -> Event:
    """Decode one log of a contract of ``protocol``; total, pure and allocation-lean.

    ``checked``, when given, holds topics already found well-formed and
    lowercase; they are not checked again, and the topics checked here are
    added. A batch repeats most topics (the event's topic0, a job id in each of
    its events), so ``decode_logs`` passes one set for the batch.
    """
    topics = log.topics
    if checked is None or not _all_checked(topics, checked):
        try:
            joined = "\x00".join(topics)
        except TypeError:  # a non-string topic from a careless caller
            return unknown_event(log, protocol, block_timestamp)
        if not _TOPICS_RE.fullmatch(joined):
            return unknown_event(log, protocol, block_timestamp)
        if not joined.islower():
            topics = tuple(joined.lower().split("\x00"))
        if checked is not None:
            checked.update(topics)
    found = _PLANS.get((protocol, topics[0]))
    if found is None:
        found = _PLANS_BY_TOPIC_COUNT.get((protocol, topics[0], len(topics)))
        if found is None:
            known = RECOGNISED_TOPICS.get((protocol, topics[0]))
            if known is not None:
                return Event(
                    log.address, protocol, known, RECOGNISED, None, {}, log, block_timestamp
                )
            return unknown_event(log, protocol, block_timestamp)
    spec, plan = found
    data = log.data
    if (
        spec.protocol is not protocol
        or len(topics) != spec.n_topics
        or not isinstance(data, bytes)
        or (len(data) != spec.data_len and (not spec.dynamic or len(data) < spec.data_len))
    ):
        return unknown_event(log, protocol, block_timestamp)
    args: dict[str, ArgValue] = {}
    for name, dec, pos, from_topic in plan:
        value = dec(topics[pos]) if from_topic else dec(data[pos : pos + 32])
        if value is None:
            return unknown_event(log, protocol, block_timestamp)
        args[name] = value
    if spec.dynamic and not _resolve_tails(spec, args, data):
        return unknown_event(log, protocol, block_timestamp)
    # job ids are ints -> decimal strings; task ids are already 0x hex strings;
    # contract-level events (Paused, role changes) belong to no subject
    subject = str(args[spec.subject_arg]) if spec.subject_arg else None
    return Event(
        log.address, protocol, spec.name, spec.variant, subject, args, log, block_timestamp
    )


def decode_logs(
    logs: Iterable[Log],
    protocol_by_address: Mapping[str, Protocol],
    timestamps: Mapping[int, int],
) -> list[Event]:
    """Decode a batch in order; the hot path of historical sync.

    ``protocol_by_address`` maps our contracts (lowercase) to their protocol;
    a log from any other address is not ours and is skipped. ``timestamps``
    maps block number -> block timestamp; a missing entry is a caller bug and
    raises ``KeyError`` rather than inventing a chain time.
    """
    out: list[Event] = []
    append = out.append
    checked: set[str] = set()
    for log in logs:
        protocol = protocol_by_address.get(log.address)
        if protocol is None:
            continue
        append(decode_log(log, protocol, timestamps[log.block_number], checked))
    return out
