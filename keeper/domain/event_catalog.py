"""The event catalog of both escrow protocols: every event shape ever deployed.

Every shape is listed, including the legacy ERC-8183 (ACP) shapes and the
older task-market shapes, and matched by topic0 (and by the number of topics
where one topic0 was deployed with different parameters indexed: ``EVENTS``).
topic0 is computed from the signature at import: abbreviations in documents
are easy to mistype, a keccak of the signature is not. ``keeper.domain.events``
decodes logs against it.

Contract-level events (``Paused``, role and fee changes) have no subject: their
``subject_arg`` is empty and their events carry ``subject=None``.

Argument names are the Solidity parameter names (``jobId``, ``client``...), so
they match what web3.py's ``process_log`` returns.

Variants: ``current`` (AgenticCommerce shapes, and shapes every dialect
shares), ``erc8183`` (shapes only the ERC8183.sol reference emits),
``legacy`` (ACP), ``older`` (earlier task-market shapes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from keeper.domain.hashing import keccak
from keeper.domain.model import Protocol

__all__ = [
    "EVENTS",
    "RECOGNISED",
    "RECOGNISED_SHAPES",
    "RECOGNISED_TOPICS",
    "SPECS",
    "UNKNOWN",
    "EventSpec",
    "spec_for",
    "topic0_of",
]

CURRENT: Final = "current"
LEGACY: Final = "legacy"
ERC8183: Final = "erc8183"
OLDER: Final = "older"
PRE14: Final = "pre14"  # task market shapes replaced at revision 14
RECOGNISED: Final = "recognised"  # known, not needed: kept with its name, not decoded
UNKNOWN: Final = "unknown"

Input = tuple[str, str, bool]  # (name, solidity type, indexed)

_STATIC_TYPES: Final = frozenset(
    {
        "uint256", "uint64", "uint48", "uint32", "uint16", "uint8",
        "address", "bytes32", "bytes4", "bool",
    }
)  # fmt: skip
DYNAMIC_TYPES: Final = frozenset({"bytes"})
# the types an indexed parameter of the protocols has, each with a topic decoder
# (keeper.domain.events); another one is refused here rather than left undecodable
TOPIC_TYPES: Final = frozenset({"uint256", "address", "bytes32", "bytes4"})


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
            if t not in _STATIC_TYPES and (indexed or t not in DYNAMIC_TYPES):
                raise ValueError(f"{self.signature}: type {t} is not supported here")
            if indexed and t not in TOPIC_TYPES:
                raise ValueError(f"{self.signature}: an indexed {t} has no topic decoder")
        object.__setattr__(self, "topic0", topic0_of(self.signature))
        object.__setattr__(self, "n_topics", 1 + sum(1 for *_, ix in self.inputs if ix))
        object.__setattr__(self, "data_len", 32 * sum(1 for *_, ix in self.inputs if not ix))
        object.__setattr__(self, "dynamic", any(t in DYNAMIC_TYPES for _, t, _ in self.inputs))


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
    # AgenticCommerce's fee setters (the IERC8183Hook version, with submittedAt): known,
    # not needed, like ERC8183.sol's PlatformFeeUpdated and EvaluatorFeeUpdated below
    _contract_spec("PlatformFeeSet", "uint256 feeBP, address indexed treasury", CURRENT),
    _contract_spec("EvaluatorFeeSet", "uint256 feeBP", CURRENT),
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
    # ERC8183WithIntent (an EIP-712 intent front end on an earlier ERC8183.sol)
    _contract_spec("IntentExecuted", "address indexed signer, bytes32 indexed nonce"),
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
    # revision 12: a reputation registry's giveFeedback reverted (settlement went on)
    _spec(_T, "ReputationFeedbackFailed", "bytes32 indexed taskId, uint256 indexed agentId"),
    _spec(_T, "HookCallFailed", "address indexed hook", contract_level=True),
    _spec(_T, "ForwarderUpdated", "address indexed forwarder, bool trusted",
          contract_level=True),
    _spec(_T, "Paused", "address account", contract_level=True),
    _spec(_T, "Unpaused", "address account", contract_level=True),
    _spec(_T, "FeesUpdated", "uint16 feeBps", contract_level=True),
    _spec(_T, "FeeRecipientUpdated", "address recipient", contract_level=True),
    # ITMPReputation's: its parameter indexed (the monolithic contract's is not: below)
    _spec(_T, "ReputationRegistryUpdated", "address indexed registry", contract_level=True),
    # revision 17: the protocol's minimum appeal window (ITMPCore, unindexed)
    _spec(_T, "MinAppealWindowUpdated", "uint32 minAppealWindowSecs", contract_level=True),
    _spec(_T, "OwnershipTransferred", "address indexed previousOwner, address indexed newOwner",
          contract_level=True),
    # the UUPS task market before the diamond (OpenZeppelin 5 upgradeable: a proxy's new
    # implementation, its initializer, Ownable2Step's first step)
    _spec(_T, "Upgraded", "address indexed implementation", contract_level=True),
    _spec(_T, "Initialized", "uint64 version", contract_level=True),
    _spec(_T, "OwnershipTransferStarted",
          "address indexed previousOwner, address indexed newOwner", contract_level=True),
    # Task market before revision 14 (TaskCreated gained stakeRequired, stakeBps)
    _spec(_T, "TaskCreated", "bytes32 indexed taskId, address indexed requester, "
          "uint256 reward, bytes4 indexed mode, uint256 expiryTime", PRE14),
    # Task market older shapes
    _spec(_T, "TaskCreated", "bytes32 indexed taskId, address indexed requester, "
          "uint256 reward, uint256 expiryTime, bytes4 mode", OLDER),
    _spec(_T, "TaskAccepted", "bytes32 indexed taskId, address indexed requester, "
          "address indexed worker, uint256 workerPayment, uint256 platformFee", OLDER),
    # the monolithic contract's rating, before raterAgentId: a topic0 of its own, known and
    # not needed, like the current TaskRated
    _spec(_T, "TaskRated", "bytes32 indexed taskId, address indexed worker, uint8 rating",
          OLDER),
    # the monolithic contract's registry event, unindexed: the topic0 of the indexed one
    # above, told apart by its number of topics (EVENTS)
    _spec(_T, "ReputationRegistryUpdated", "address registry", OLDER, contract_level=True),
)  # fmt: skip

# Known shapes recognised by topic0 and kept with their name (no args, no subject), so
# keeper_unknown_events_total counts only shapes never seen: those with dynamic parameters
# the decoder does not slice.
RECOGNISED_SHAPES: Final[tuple[tuple[Protocol, str], ...]] = (
    (_T, "DefaultHooksSet(address[])"),
    (_T, "DiamondCut((address,uint8,bytes4[])[],address,bytes)"),
)
RECOGNISED_TOPICS: Final[dict[tuple[Protocol, str], str]] = {
    (p, topic0_of(sig)): sig[: sig.index("(")] for p, sig in RECOGNISED_SHAPES
}


def _by_layout(specs: Iterable[EventSpec]) -> dict[tuple[Protocol, str, int], EventSpec]:
    """Each spec under (protocol, topic0, number of topics); two under one key are refused.

    Keyed by protocol: both protocols' contracts emit OpenZeppelin's Paused(address) and
    Unpaused(address), one topic0 that means "this escrow is paused" in each. Keyed by
    the number of topics: a signature does not say which parameters are indexed, so one
    topic0 can have several layouts (the task market's ReputationRegistryUpdated(address),
    unindexed in the monolithic contract, indexed in ITMPReputation), and a log's topics
    tell which it is. Two layouts with as many topics could not be told apart.
    """
    out: dict[tuple[Protocol, str, int], EventSpec] = {}
    for s in specs:
        key = (s.protocol, s.topic0, s.n_topics)
        if key in out:
            raise RuntimeError(
                f"{s.signature} ({s.variant}) and {out[key].signature} ({out[key].variant}): "
                f"one topic0 of one protocol, {s.n_topics} topics each"
            )
        out[key] = s
    return out


EVENTS: Final[Mapping[tuple[Protocol, str, int], EventSpec]] = _by_layout(SPECS)


def spec_for(name: str, variant: str = CURRENT) -> EventSpec:
    """Look a spec up by name and variant (tests and encoders use this)."""
    for s in SPECS:
        if s.name == name and s.variant == variant:
            return s
    raise KeyError(f"{name}/{variant}")
