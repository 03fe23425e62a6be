"""Every event declared in PROTOCOLS.md exists in the compiled ABIs with the same
parameter names, types and indexed flags, and its topic0 is keccak256 of the signature
(cross-checked against the abbreviated hashes published in PROTOCOLS.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from escrow_harness import event_signature, topic0
from eth_utils.abi import collapse_if_tuple

from keeper.devnet.contracts import load_abi
from keeper.domain.abi import split_types

# (declaration exactly as in PROTOCOLS.md, published topic0 prefix, published suffix)
COMMON_8183 = [
    ("JobFunded(uint256 indexed jobId, address indexed client, uint256 amount)", "e3fbcc1e", "b3"),
    (
        "JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable)",
        "80c17db7",
        "8e",
    ),
    (
        "JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason)",
        "0fd54bd3",
        "44",
    ),
    (
        "JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason)",
        "ae7362b1",
        "75",
    ),
    ("JobExpired(uint256 indexed jobId)", "97237956", "32"),
    (
        "PaymentReleased(uint256 indexed jobId, address indexed provider, uint256 amount)",
        "21d71db5",
        "b0",
    ),
    (
        "PlatformFeePaid(uint256 indexed jobId, address indexed treasury, uint256 amount)",
        "0e61cfd0",
        "62",
    ),
    (
        "EvaluatorFeePaid(uint256 indexed jobId, address indexed evaluator, uint256 amount)",
        "253dd534",
        "61",
    ),
    ("Refunded(uint256 indexed jobId, address indexed client, uint256 amount)", "7ca5472b", "c4"),
]
CURRENT_8183 = [
    (
        "JobCreated(uint256 indexed jobId, address indexed client, address indexed provider, "
        "address evaluator, uint256 expiredAt, address hook)",
        "b0f0239b",
        "79b9",
    ),
    (
        "ProviderSet(uint256 indexed jobId, address indexed provider, uint256 agentId)",
        "49d0adc1",
        "e7",
    ),
    ("BudgetSet(uint256 indexed jobId, address indexed token, uint256 amount)", "74f37e24", "cc"),
]
LEGACY_8183 = [
    (
        "JobCreated(uint256 indexed jobId, address indexed client, address indexed provider, "
        "address evaluator, uint256 expiredAt)",
        "ef137df1",
        "2a0f",
    ),
    ("ProviderSet(uint256 indexed jobId, address indexed provider)", "9a87df07", "69"),
    # PROTOCOLS.md abbreviates this one as 0x869e2577…68, but keccak256 of the declared
    # signature ends in 38: the declaration wins (the doc says not to trust abbreviations)
    ("BudgetSet(uint256 indexed jobId, uint256 amount)", "869e2577", "38"),
]
PRE14_CREATED = [
    (
        "TaskCreated(bytes32 indexed taskId, address indexed requester, uint256 reward, "
        "bytes4 indexed mode, uint256 expiryTime)",
        "ee59b788",
        "b8",
    ),
]
REV21_TASKS = [
    (
        "TaskCreated(bytes32 indexed taskId, address indexed requester, uint256 reward, "
        "bytes4 indexed mode, uint256 expiryTime, bool stakeRequired, uint16 stakeBps)",
        "e0dc4072",
        "",
    ),
    (
        "TaskUpdated(bytes32 indexed taskId, uint256 newReward, uint256 newExpiryTime)",
        "d1530ce5",
        "",
    ),
    ("SubmissionRejected(bytes32 indexed taskId, address indexed worker)", "c60688aa", ""),
]
# known to the indexer, not needed by the keeper; the diamond emits some of them
DIAMOND_AUX = [
    ("StakeReturned(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount)", "", ""),
    (
        "RequesterReputation(bytes32 indexed taskId, address indexed requester, bytes32 event_, "
        "uint256 reward, uint32 submissionCount, bool selfAward)",
        "",
        "",
    ),
    ("ForwarderUpdated(address indexed forwarder, bool trusted)", "", ""),
    ("Paused(address account)", "", ""),
    ("Unpaused(address account)", "", ""),
]
# AgenticCommerce's fee setters (the devnet AgenticCommerce and the emitter declare them)
FEE_SETTERS_8183 = [
    ("PlatformFeeSet(uint256 feeBP, address indexed treasury)", "", ""),
    ("EvaluatorFeeSet(uint256 feeBP)", "", ""),
]
EMITTER_AUX = [
    *FEE_SETTERS_8183,
    ("StakeForfeited(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount)", "", ""),
    (
        "TaskRated(bytes32 indexed taskId, address indexed worker, uint8 rating, "
        "uint256 raterAgentId)",
        "",
        "",
    ),
    # the monolithic contract's, before raterAgentId
    ("TaskRated(bytes32 indexed taskId, address indexed worker, uint8 rating)", "", ""),
    (
        "SelfAward(bytes32 indexed taskId, address indexed requester, address indexed worker)",
        "",
        "",
    ),
    ("BidSubmitted(bytes32 indexed taskId, address indexed worker, uint256 price)", "", ""),
    (
        "AuctionAccepted(bytes32 indexed taskId, address indexed worker, uint256 acceptedPrice)",
        "",
        "",
    ),
    ("PitchSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 pitchHash)", "", ""),
    (
        "ProofSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 proofHash, "
        "bytes32 proofType, uint256 metricValue)",
        "",
        "",
    ),
    ("HookRegistered(bytes32 indexed taskId, address hookContract)", "", ""),
    ("HookCallFailed(address indexed hook)", "", ""),
    ("FeesUpdated(uint16 feeBps)", "", ""),
    ("FeeRecipientUpdated(address recipient)", "", ""),
    # indexed as ITMPReputation declares it (the diamond's); the monolithic contract's
    # unindexed layout has the same topic0 (the emitter declares it in an interface)
    ("ReputationRegistryUpdated(address indexed registry)", "", ""),
    ("ReputationRegistryUpdated(address registry)", "", ""),
    (
        "OwnershipTransferred(address indexed previousOwner, address indexed newOwner)",
        "",
        "",
    ),
    ("ReputationFeedbackFailed(bytes32 indexed taskId, uint256 indexed agentId)", "", ""),
    ("Upgraded(address indexed implementation)", "", ""),
    ("Initialized(uint64 version)", "", ""),
    (
        "OwnershipTransferStarted(address indexed previousOwner, address indexed newOwner)",
        "",
        "",
    ),
    ("DefaultHooksSet(address[] hooks)", "", ""),
    ("MinAppealWindowUpdated(uint32 minAppealWindowSecs)", "", ""),
]
CURRENT_TASKS = [
    (
        "TaskClaimed(bytes32 indexed taskId, address indexed worker, uint256 stakeAmount)",
        "0c94d586",
        "be",
    ),
    ("TaskWorkerSelected(bytes32 indexed taskId, address indexed worker)", "8259e46a", "1e"),
    (
        "TaskSubmitted(bytes32 indexed taskId, address indexed worker, bytes32 deliverable)",
        "7d30d188",
        "4b",
    ),
    (
        "EvaluatorAssigned(bytes32 indexed taskId, address indexed evaluator, uint256 stakeAmount)",
        "7d4a7c40",
        "9e",
    ),
    (
        "TaskEvaluated(bytes32 indexed taskId, address indexed evaluator, uint8 verdictType, "
        "uint16 score)",
        "52607bc8",
        "97",
    ),
    ("TaskAppealed(bytes32 indexed taskId, address indexed appellant)", "78e43e8c", "aa"),
    ("TaskDisputed(bytes32 indexed taskId, address indexed disputeResolver)", "1d8cbd42", "61"),
    (
        "EvaluatorTimedOut(bytes32 indexed taskId, address indexed evaluator, "
        "uint256 forfeitedStake)",
        "6995e4e2",
        "4a",
    ),
    (
        "TaskCompleted(bytes32 indexed taskId, address indexed requester, address indexed worker, "
        "uint256 workerPayment, uint256 platformFee)",
        "0c01e82f",
        "cb",
    ),
    (
        "TaskExpired(bytes32 indexed taskId, address indexed requester, uint256 refundAmount)",
        "e4ec5a16",
        "de",
    ),
    (
        "TaskCancelled(bytes32 indexed taskId, address indexed requester, uint256 refundAmount)",
        "9954d682",
        "bc",
    ),
]
OLDER_TASKS = [
    (
        "TaskCreated(bytes32 indexed taskId, address indexed requester, uint256 reward, "
        "uint256 expiryTime, bytes4 mode)",
        "bdfc881a",
        "90",
    ),
    (
        "TaskAccepted(bytes32 indexed taskId, address indexed requester, address indexed worker, "
        "uint256 workerPayment, uint256 platformFee)",
        "46c82fee",
        "97",
    ),
    ("TaskReopened(bytes32 indexed taskId)", "ae5c872b", "fa"),
]
ALL = (
    COMMON_8183 + CURRENT_8183 + LEGACY_8183 + PRE14_CREATED + REV21_TASKS + CURRENT_TASKS
    + OLDER_TASKS
)  # fmt: skip

# contract -> the events it must declare, no more and no fewer (the emitter: all + Mystery)
EXPECTED = {
    "AgenticCommerce": [
        *CURRENT_8183,
        *COMMON_8183,
        ("HookWhitelistUpdated(address indexed hook, bool status)", "", ""),
        *FEE_SETTERS_8183,
    ],
    "LegacyAgenticCommerce": LEGACY_8183 + COMMON_8183,
    "LegacyTaskMarket": PRE14_CREATED + CURRENT_TASKS,
    "TaskMarket": [
        *REV21_TASKS,
        *CURRENT_TASKS,
        *DIAMOND_AUX,
        (
            "DiamondCut((address,uint8,bytes4[])[] _diamondCut, address _init, bytes _calldata)",
            "",
            "",
        ),
    ],
    "EventEmitter": [
        *ALL,
        *DIAMOND_AUX,
        *EMITTER_AUX,
        ("Mystery(uint256 indexed a, bytes b)", "", ""),
    ],
}

Param = tuple[str, str, bool]


def parse(declaration: str) -> tuple[str, list[Param]]:
    """'Name(type [indexed] name, ...)' -> (name, [(type, name, indexed)])."""
    match = re.fullmatch(r"(\w+)\((.*)\)", declaration)
    assert match, declaration
    params: list[Param] = []
    for part in filter(None, (p.strip() for p in split_types(match.group(2)))):
        words = part.split()
        params.append((words[0], words[-1], "indexed" in words[1:-1]))
    return match.group(1), params


def signature(declaration: str) -> str:
    name, params = parse(declaration)
    return f"{name}({','.join(t for t, _, _ in params)})"


Layout = tuple[str, int]  # (topic0, number of indexed parameters)


def layout(declaration: str) -> Layout:
    """What tells a log's shape: one topic0 can be declared with different parameters
    indexed (ReputationRegistryUpdated), told apart by the number of topics."""
    return topic0(signature(declaration)), sum(ix for _, _, ix in parse(declaration)[1])


def abi_events(contract: str) -> dict[Layout, dict[str, Any]]:
    """(topic0, number of indexed parameters) -> ABI event entry of a compiled contract."""
    return {
        (topic0(event_signature(e)), sum(bool(i["indexed"]) for i in e["inputs"])): e
        for e in load_abi(contract)
        if e["type"] == "event" and not e["anonymous"]
    }


@pytest.mark.parametrize(("declaration", "prefix", "suffix"), ALL, ids=lambda v: str(v)[:40])
def test_topic0_matches_published_abbreviation(declaration: str, prefix: str, suffix: str) -> None:
    """keccak256 of each signature matches the abbreviated topic0 in PROTOCOLS.md."""
    digest = topic0(signature(declaration))
    assert digest.startswith("0x" + prefix)
    assert digest.endswith(suffix)


@pytest.mark.parametrize("contract", sorted(EXPECTED))
def test_contract_declares_exactly_the_protocol_events(contract: str) -> None:
    """The compiled ABI's events are exactly the protocol's, by topic0 and topic count."""
    expected = {layout(d) for d, _, _ in EXPECTED[contract]}
    assert len(expected) == len(EXPECTED[contract])
    assert set(abi_events(contract)) == expected


@pytest.mark.parametrize("contract", sorted(EXPECTED))
def test_indexed_flags_and_names_match(contract: str) -> None:
    """Each event's parameter names, types and indexed flags match the declaration."""
    events = abi_events(contract)
    for declaration, _, _ in EXPECTED[contract]:
        _, params = parse(declaration)
        entry = events[layout(declaration)]
        got = [(collapse_if_tuple(i), i["name"], bool(i["indexed"])) for i in entry["inputs"]]
        assert got == params, declaration
