"""The event catalog of both escrow protocols and a fast, total log decoder.

Every event shape ever deployed is listed, including the legacy ERC-8183 (ACP)
shapes and the older task-market shapes, and matched by topic0. topic0 is
computed from the signature at import: abbreviations in documents are easy to
mistype, a keccak of the signature is not.

The decoder slices 32-byte ABI words directly instead of going through
eth_abi: the indexer decodes tens of thousands of logs a second. Static
parameters are read at fixed offsets; the one dynamic type the protocols emit
(``bytes``, in ERC8183's ``ClaimSubmitted``) takes a slower path that accepts
only the canonical layout Solidity writes (tails in parameter order, right
after the head, zero-padded). It is *total*: a log we cannot decode exactly
(unknown topic0, wrong number of topics, wrong data length, dirty padding,
out-of-range small ints, a non-canonical tail) becomes an ``unknown`` event,
kept raw and counted, never an exception — a hostile contract must not stop
the indexer.

Contract-level events (``Paused``, role and fee changes) have no subject: their
``subject_arg`` is empty and their events carry ``subject=None``.

Argument names are the Solidity parameter names (``jobId``, ``client``...), so
they match what web3.py's ``process_log`` returns. Value conventions:
uint -> int, address -> lowercase ``0x`` + 40 hex, bytes32 -> ``0x`` + 64 hex,
bytes4 -> ``0x`` + 8 hex, bytes -> ``0x`` + hex, bool -> bool.

Variants: ``current`` (AgenticCommerce shapes, and shapes every dialect
shares), ``erc8183`` (shapes only the ERC8183.sol reference emits),
``legacy`` (ACP), ``older`` (earlier task-market shapes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from eth_utils.crypto import keccak

from keeper.domain.model import ArgValue, Event, Log, Protocol

__all__ = [
    "EVENTS",
    "RECOGNISED_SHAPES",
    "SPECS",
    "EventSpec",
    "decode_log",
    "decode_logs",
    "spec_for",
    "topic0_of",
    "unknown_event",
]

CURRENT: Final = "current"
LEGACY: Final = "legacy"
ERC8183: Final = "erc8183"
OLDER: Final = "older"
PRE14: Final = "pre14"  # task market shapes replaced at revision 14
RECOGNISED: Final = "recognised"  # known, not needed: kept with its name, not decoded
UNKNOWN: Final = "unknown"

Input = tuple[str, str, bool]  # (name, solidity type, indexed)

_ZERO12: Final = bytes(12)
_ZERO28: Final = bytes(28)
_ZERO31: Final = bytes(31)
_HEX_ZERO24: Final = "0" * 24
_HEX_ZERO56: Final = "0" * 56
_STATIC_TYPES: Final = frozenset(
    {
        "uint256", "uint64", "uint48", "uint32", "uint16", "uint8",
        "address", "bytes32", "bytes4", "bool",
    }
)  # fmt: skip
_DYNAMIC_TYPES: Final = frozenset({"bytes"})


def topic0_of(signature: str) -> str:
    """keccak256 of the canonical signature, lowercase ``0x`` hex."""
    return "0x" + keccak(text=signature).hex()


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One event shape: what it is called, how it is laid out, whose state it moves."""

    name: str
    signature: str
    variant: str
    protocol: Protocol
    inputs: tuple[Input, ...]
    subject_arg: str  # "" for a contract-level event
    topic0: str = field(init=False)
    n_topics: int = field(init=False)
    # the head: one word per non-indexed parameter (the exact length when all are static)
    data_len: int = field(init=False)
    dynamic: bool = field(init=False)

    def __post_init__(self) -> None:
        types = ",".join(t for _, t, _ in self.inputs)
        if self.signature != f"{self.name}({types})":
            raise ValueError(f"signature {self.signature!r} disagrees with inputs")
        for _, t, indexed in self.inputs:
            if t not in _STATIC_TYPES and (indexed or t not in _DYNAMIC_TYPES):
                raise ValueError(f"{self.signature}: type {t} is not supported here")
        object.__setattr__(self, "topic0", topic0_of(self.signature))
        object.__setattr__(self, "n_topics", 1 + sum(1 for *_, ix in self.inputs if ix))
        object.__setattr__(self, "data_len", 32 * sum(1 for *_, ix in self.inputs if not ix))
        object.__setattr__(self, "dynamic", any(t in _DYNAMIC_TYPES for _, t, _ in self.inputs))


def _spec(
    protocol: Protocol,
    name: str,
    params: str,
    variant: str = CURRENT,
    subject: str = "",
    *,
    contract_level: bool = False,
) -> EventSpec:
    """Build a spec from a compact ``"type name [indexed], ..."`` parameter list.

    ``contract_level``: the event is about the contract (admin, forwarder, fees), not a
    job or task: it gets no subject and moves no projection.
    """
    inputs: list[Input] = []
    for part in filter(None, (p.strip() for p in params.split(","))):
        words = part.split()
        indexed = len(words) == 3 and words[1] == "indexed"
        inputs.append((words[-1], words[0], indexed))
    signature = f"{name}({','.join(t for _, t, _ in inputs)})"
    subject_arg = "" if contract_level else subject or inputs[0][0]
    return EventSpec(name, signature, variant, protocol, tuple(inputs), subject_arg)


def _contract_spec(name: str, params: str, variant: str = ERC8183) -> EventSpec:
    return _spec(Protocol.ERC8183, name, params, variant, contract_level=True)


_E = Protocol.ERC8183
_T = Protocol.TASKMARKET

SPECS: Final[tuple[EventSpec, ...]] = (
    # ERC-8183 current reference (erc-8183/base-contracts)
    _spec(_E, "JobCreated", "uint256 indexed jobId, address indexed client, "
          "address indexed provider, address evaluator, uint256 expiredAt, address hook"),
    _spec(_E, "ProviderSet", "uint256 indexed jobId, address indexed provider, uint256 agentId"),
    _spec(_E, "BudgetSet", "uint256 indexed jobId, address indexed token, uint256 amount"),
    _spec(_E, "JobFunded", "uint256 indexed jobId, address indexed client, uint256 amount"),
    _spec(_E, "JobSubmitted",
          "uint256 indexed jobId, address indexed provider, bytes32 deliverable"),
    _spec(_E, "JobCompleted", "uint256 indexed jobId, address indexed evaluator, bytes32 reason"),
    _spec(_E, "JobRejected", "uint256 indexed jobId, address indexed rejector, bytes32 reason"),
    _spec(_E, "JobExpired", "uint256 indexed jobId"),
    _spec(_E, "PaymentReleased",
          "uint256 indexed jobId, address indexed provider, uint256 amount"),
    _spec(_E, "PlatformFeePaid",
          "uint256 indexed jobId, address indexed treasury, uint256 amount"),
    _spec(_E, "EvaluatorFeePaid",
          "uint256 indexed jobId, address indexed evaluator, uint256 amount"),
    _spec(_E, "Refunded", "uint256 indexed jobId, address indexed client, uint256 amount"),
    # ERC-8183 legacy reference (ACP)
    _spec(_E, "JobCreated", "uint256 indexed jobId, address indexed client, "
          "address indexed provider, address evaluator, uint256 expiredAt", LEGACY),
    _spec(_E, "ProviderSet", "uint256 indexed jobId, address indexed provider", LEGACY),
    _spec(_E, "BudgetSet", "uint256 indexed jobId, uint256 amount", LEGACY),
    # ERC-8183 ERC8183.sol reference: actor-indexed setters, uint48 expiry, claims.
    # An earlier ERC8183.sol emitted BudgetSet(uint256,address,uint256): the
    # current-variant shape above, so it needs no entry of its own.
    _spec(_E, "JobCreated", "uint256 indexed jobId, address indexed client, "
          "address indexed provider, address evaluator, uint48 expiredAt, address hook", ERC8183),
    _spec(_E, "ProviderSet", "uint256 indexed jobId, address indexed actor, "
          "address indexed provider, uint256 agentId", ERC8183),
    _spec(_E, "BudgetSet", "uint256 indexed jobId, address indexed actor, "
          "address indexed token, uint256 amount", ERC8183),
    _spec(_E, "PayoutReceiverSet", "uint256 indexed jobId, address indexed actor, "
          "address indexed payoutReceiver", ERC8183),
    _spec(_E, "Disbursed", "uint256 indexed jobId, address indexed receiver, bytes4 selector, "
          "uint256 amount", ERC8183),
    _spec(_E, "Settled", "uint256 indexed jobId, uint256 cumulativeAmount, uint256 delta",
          ERC8183),
    _spec(_E, "ClaimSubmitted", "uint256 indexed jobId, address indexed provider, "
          "uint256 cumulativeAmount, uint256 delta, bytes32 deliverable, bytes optParams",
          ERC8183),
    _spec(_E, "ClaimSettled", "uint256 indexed jobId, address indexed settler, "
          "uint256 cumulativeAmount, uint256 delta, bytes32 deliverable", ERC8183),
    _spec(_E, "ClaimApproved", "uint256 indexed jobId, address indexed approver, "
          "uint256 cumulativeAmount, uint256 delta, bytes32 deliverable", ERC8183),
    _spec(_E, "ClaimRejected", "uint256 indexed jobId, address indexed rejector, bytes32 reason",
          ERC8183),
    _spec(_E, "HookDetached", "uint256 indexed jobId, address indexed hook", ERC8183),
    # ERC8183.sol contract-level events: pause state (the keeper's business), and
    # administration the keeper only needs to recognise as known.
    _contract_spec("Paused", "address account", CURRENT),
    _contract_spec("Unpaused", "address account", CURRENT),
    _contract_spec("HookWhitelistUpdated", "address indexed hook, bool status"),
    _contract_spec("PaymentTokenAllowlistUpdated", "address indexed token, bool status"),
    _contract_spec("PlatformFeeUpdated", "uint256 feeBP, address indexed treasury"),
    _contract_spec("EvaluatorFeeUpdated", "uint256 feeBP"),
    _contract_spec("EmergencyWithdraw",
                   "address indexed token, address indexed to, uint256 amount"),
    _contract_spec("AuthorizationUsed", "address indexed signer, bytes32 indexed nonce"),
    # OpenZeppelin access-control, UUPS-upgrade and EIP-712 events (both upgradeable references)
    _contract_spec("RoleGranted", "bytes32 indexed role, address indexed account, "
                   "address indexed sender", CURRENT),
    _contract_spec("RoleRevoked", "bytes32 indexed role, address indexed account, "
                   "address indexed sender", CURRENT),
    _contract_spec("RoleAdminChanged", "bytes32 indexed role, bytes32 indexed previousAdminRole, "
                   "bytes32 indexed newAdminRole", CURRENT),
    _contract_spec("Upgraded", "address indexed implementation", CURRENT),
    _contract_spec("Initialized", "uint64 version", CURRENT),
    _contract_spec("EIP712DomainChanged", "", CURRENT),
    # Task market (ERC-8194 / ERC-8195) revision 21 diamond: the shapes the keeper needs
    _spec(_T, "TaskCreated", "bytes32 indexed taskId, address indexed requester, "
          "uint256 reward, bytes4 indexed mode, uint256 expiryTime, bool stakeRequired, "
          "uint16 stakeBps"),
    _spec(_T, "TaskUpdated", "bytes32 indexed taskId, uint256 newReward, uint256 newExpiryTime"),
    _spec(_T, "TaskClaimed", "bytes32 indexed taskId, address indexed worker, uint256 stakeAmount"),
    _spec(_T, "TaskWorkerSelected", "bytes32 indexed taskId, address indexed worker"),
    _spec(_T, "TaskSubmitted",
          "bytes32 indexed taskId, address indexed worker, bytes32 deliverable"),
    _spec(_T, "SubmissionRejected", "bytes32 indexed taskId, address indexed worker"),
    _spec(_T, "EvaluatorAssigned",
          "bytes32 indexed taskId, address indexed evaluator, uint256 stakeAmount"),
    _spec(_T, "TaskEvaluated", "bytes32 indexed taskId, address indexed evaluator, "
          "uint8 verdictType, uint16 score"),
    _spec(_T, "TaskAppealed", "bytes32 indexed taskId, address indexed appellant"),
    _spec(_T, "TaskDisputed", "bytes32 indexed taskId, address indexed disputeResolver"),
    _spec(_T, "EvaluatorTimedOut", "bytes32 indexed taskId, address indexed evaluator, "
          "uint256 forfeitedStake"),
    _spec(_T, "TaskCompleted", "bytes32 indexed taskId, address indexed requester, "
          "address indexed worker, uint256 workerPayment, uint256 platformFee"),
    _spec(_T, "TaskExpired",
          "bytes32 indexed taskId, address indexed requester, uint256 refundAmount"),
    _spec(_T, "TaskCancelled",
          "bytes32 indexed taskId, address indexed requester, uint256 refundAmount"),
    _spec(_T, "TaskReopened", "bytes32 indexed taskId"),
    # Task market, known and not needed by the keeper (decoded, stored, no state change)
    _spec(_T, "StakeForfeited",
          "bytes32 indexed taskId, address indexed worker, uint256 stakeAmount"),
    _spec(_T, "StakeReturned",
          "bytes32 indexed taskId, address indexed worker, uint256 stakeAmount"),
    _spec(_T, "TaskRated", "bytes32 indexed taskId, address indexed worker, uint8 rating, "
          "uint256 raterAgentId"),
    _spec(_T, "RequesterReputation", "bytes32 indexed taskId, address indexed requester, "
          "bytes32 event_, uint256 reward, uint32 submissionCount, bool selfAward"),
    _spec(_T, "SelfAward", "bytes32 indexed taskId, address indexed requester, "
          "address indexed worker"),
    _spec(_T, "BidSubmitted", "bytes32 indexed taskId, address indexed worker, uint256 price"),
    _spec(_T, "AuctionAccepted",
          "bytes32 indexed taskId, address indexed worker, uint256 acceptedPrice"),
    _spec(_T, "PitchSubmitted",
          "bytes32 indexed taskId, address indexed worker, bytes32 pitchHash"),
    _spec(_T, "ProofSubmitted", "bytes32 indexed taskId, address indexed worker, "
          "bytes32 proofHash, bytes32 proofType, uint256 metricValue"),
    _spec(_T, "HookRegistered", "bytes32 indexed taskId, address hookContract"),
    _spec(_T, "HookCallFailed", "address indexed hook", contract_level=True),
    _spec(_T, "ForwarderUpdated", "address indexed forwarder, bool trusted",
          contract_level=True),
    _spec(_T, "Paused", "address account", contract_level=True),
    _spec(_T, "Unpaused", "address account", contract_level=True),
    _spec(_T, "FeesUpdated", "uint16 feeBps", contract_level=True),
    _spec(_T, "FeeRecipientUpdated", "address recipient", contract_level=True),
    _spec(_T, "ReputationRegistryUpdated", "address registry", contract_level=True),
    _spec(_T, "OwnershipTransferred", "address indexed previousOwner, address indexed newOwner",
          contract_level=True),
    # Task market before revision 14 (TaskCreated gained stakeRequired, stakeBps)
    _spec(_T, "TaskCreated", "bytes32 indexed taskId, address indexed requester, "
          "uint256 reward, bytes4 indexed mode, uint256 expiryTime", PRE14),
    # Task market older shapes
    _spec(_T, "TaskCreated", "bytes32 indexed taskId, address indexed requester, "
          "uint256 reward, uint256 expiryTime, bytes4 mode", OLDER),
    _spec(_T, "TaskAccepted", "bytes32 indexed taskId, address indexed requester, "
          "address indexed worker, uint256 workerPayment, uint256 platformFee", OLDER),
)  # fmt: skip

# Known shapes with dynamic parameters the decoder does not slice: recognised by topic0
# and kept with their name (no args, no subject), so keeper_unknown_events_total counts
# only shapes never seen.
RECOGNISED_SHAPES: Final[tuple[tuple[Protocol, str], ...]] = (
    (_T, "DefaultHooksSet(address[])"),
    (_T, "DiamondCut((address,uint8,bytes4[])[],address,bytes)"),
)
_RECOGNISED: Final[dict[tuple[Protocol, str], str]] = {
    (p, topic0_of(sig)): sig[: sig.index("(")] for p, sig in RECOGNISED_SHAPES
}

# Keyed by protocol too: both protocols' contracts emit OpenZeppelin's Paused(address)
# and Unpaused(address), one topic0 that means "this escrow is paused" in each.
EVENTS: Final[Mapping[tuple[Protocol, str], EventSpec]] = {(s.protocol, s.topic0): s for s in SPECS}
if len(EVENTS) != len(SPECS):  # pragma: no cover - a catalog typo, caught at import
    raise RuntimeError("two event specs of one protocol share a topic0")


def spec_for(name: str, variant: str = CURRENT) -> EventSpec:
    """Look a spec up by name and variant (tests and encoders use this)."""
    for s in SPECS:
        if s.name == name and s.variant == variant:
            return s
    raise KeyError(f"{name}/{variant}")


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


def _topic_small(bits: int) -> Callable[[str], ArgValue | None]:
    limit = 1 << bits

    def dec(t: str) -> ArgValue | None:
        v = int(t, 16)
        return v if v < limit else None

    return dec


def _topic_bool(t: str) -> ArgValue | None:
    v = int(t, 16)
    return bool(v) if v < 2 else None


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
    "uint64": _topic_small(64),
    "uint48": _topic_small(48),
    "uint32": _topic_small(32),
    "uint16": _topic_small(16),
    "uint8": _topic_small(8),
    "address": _topic_address,
    "bytes32": _topic_bytes32,
    "bytes4": _topic_bytes4,
    "bool": _topic_bool,
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
            dec = _word_uint if typ in _DYNAMIC_TYPES else _WORD_DECODERS[typ]
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
        if indexed or typ not in _DYNAMIC_TYPES:
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


_PLANS: Final[dict[tuple[Protocol, str], tuple[EventSpec, _Plan]]] = {
    (s.protocol, s.topic0): (s, _plan(s)) for s in SPECS
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


def decode_log(log: Log, protocol: Protocol, block_timestamp: int) -> Event:
    """Decode one log of a contract of ``protocol``; total, pure and allocation-lean."""
    topics = log.topics
    try:
        joined = "\x00".join(topics)
    except TypeError:  # a non-string topic from a careless caller
        return unknown_event(log, protocol, block_timestamp)
    if not _TOPICS_RE.fullmatch(joined):
        return unknown_event(log, protocol, block_timestamp)
    if not joined.islower():
        topics = tuple(joined.lower().split("\x00"))
    found = _PLANS.get((protocol, topics[0]))
    if found is None:
        known = _RECOGNISED.get((protocol, topics[0]))
        if known is not None:
            return Event(log.address, protocol, known, RECOGNISED, None, {}, log, block_timestamp)
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
    for log in logs:
        protocol = protocol_by_address.get(log.address)
        if protocol is None:
            continue
        append(decode_log(log, protocol, timestamps[log.block_number]))
    return out
