"""Core value types shared by every layer.

Conventions (relied upon everywhere, so kept in one place):
- addresses and hashes are lowercase ``0x`` hex strings;
- ERC-8183 job ids are decimal strings, task ids ``0x`` + 64 hex chars, so both
  fit one ``subject`` column and sort/compare without a chain lookup;
- token amounts and uint256 values are Python ``int`` and are stored as TEXT,
  never floats;
- timestamps are chain seconds (block timestamps), never the wall clock;
- ``Log``, ``Event`` and ``ChainRead`` are values: nothing assigns to their
  fields once built (the store's decode cache relies on it). They are not
  frozen dataclasses only because a frozen one sets each field through
  ``object.__setattr__``, which cost more than the rest of checking and
  decoding a log on the backfill's hot path (bench/README.md); they hash and
  compare by value all the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Final, TypeAlias

ArgValue: TypeAlias = int | str | bool | tuple["ArgValue", ...]


class Protocol(StrEnum):
    """Which escrow family a contract speaks."""

    ERC8183 = "erc8183"
    TASKMARKET = "taskmarket"


class JobStatus(IntEnum):
    """ERC-8183 ``JobStatus``; values match the Solidity enum."""

    OPEN = 0
    FUNDED = 1
    SUBMITTED = 2
    COMPLETED = 3
    REJECTED = 4
    EXPIRED = 5

    @property
    def label(self) -> str:
        return self.name.lower()


class TaskStatus(IntEnum):
    """Task market ``TaskStatus``; values match the Solidity enum."""

    OPEN = 0
    CLAIMED = 1
    WORKER_SELECTED = 2
    PENDING_APPROVAL = 3
    ACCEPTED = 4
    EXPIRED = 5
    CANCELLED = 6
    REVIEW = 7
    APPEALING = 8
    DISPUTED = 9

    @property
    def label(self) -> str:
        return self.name.lower()


# the labels of the subjects still holding or awaiting escrow, as the store keeps them
# (its reads of what a keeper tick and the status figures look at)
LIVE_JOB_STATUSES: Final = tuple(
    s.label for s in (JobStatus.OPEN, JobStatus.FUNDED, JobStatus.SUBMITTED)
)
TERMINAL_TASK_STATUSES: Final = tuple(
    s.label for s in (TaskStatus.ACCEPTED, TaskStatus.EXPIRED, TaskStatus.CANCELLED)
)
LIVE_TASK_STATUSES: Final = tuple(
    s.label for s in TaskStatus if s.label not in TERMINAL_TASK_STATUSES
)


class VerdictType(IntEnum):
    APPROVE = 0
    REJECT = 1
    PARTIAL = 2


@dataclass(frozen=True, slots=True)
class BlockHeader:
    """The part of a block the indexer needs: identity, ancestry, chain time."""

    number: int
    hash: str
    parent_hash: str
    timestamp: int


@dataclass(slots=True, unsafe_hash=True)  # a value; not frozen: see the module docstring
class Log:
    """One ``eth_getLogs`` entry, validated and normalised by the RPC layer."""

    address: str
    topics: tuple[str, ...]
    data: bytes
    block_number: int
    block_hash: str
    tx_hash: str
    tx_index: int
    log_index: int


class Logs(list[Log]):
    """A getLogs answer's logs, with the timestamps its entries gave their blocks.

    ``timestamps`` maps a block number to the ``blockTimestamp`` its logs carried
    (execution-apis#639: geth, reth, Nethermind, Besu, Erigon and anvil send it);
    a block whose logs had none, or none that passed the checks, is absent, and its
    timestamp is read from its header as before.
    """

    __slots__ = ("timestamps",)

    def __init__(self, logs: Iterable[Log] = ()):
        super().__init__(logs)
        self.timestamps: dict[int, int] = {}


@dataclass(slots=True, unsafe_hash=True)  # a value; not frozen: see the module docstring
class Event:
    """A log matched against our contracts.

    ``name`` is None for a log whose topic0 we do not know: it is kept raw and
    counted, never dropped. ``variant`` tells apart event shapes that share a
    name (``current``, ``legacy``, ``older``).
    """

    contract: str
    protocol: Protocol
    name: str | None
    variant: str
    subject: str | None
    args: Mapping[str, ArgValue]
    log: Log
    block_timestamp: int


@dataclass(slots=True, unsafe_hash=True)  # a value; not frozen: see the module docstring
class ChainRead:
    """An on-chain view call recorded with the block it was read at.

    Projections are a pure function of events plus these reads, so a rebuild
    never needs the network and a reorg drops reads with their block.
    """

    contract: str
    subject: str
    kind: str  # e.g. "getJob", "getTaskEvaluatorConfig", "paymentToken"
    block_number: int  # the block of the event that called for the read
    block_hash: str
    result: Mapping[str, ArgValue]
    # where the state was read (keeper.domain.reads): "event block", "finalized block N",
    # "head block N", or "missing" when no block the node serves could answer exactly
    source: str = "event block"


@dataclass(slots=True)
class JobState:
    """Projection of one ERC-8183 job (table ``jobs``)."""

    contract: str
    job_id: str
    client: str = ""
    provider: str = ""
    evaluator: str = ""
    hook: str = ""
    token: str = ""
    budget: int = 0
    funded_amount: int = 0
    expired_at: int = 0
    submitted_at: int | None = None
    status: JobStatus = JobStatus.OPEN
    deliverable: str | None = None
    reason: str | None = None
    description: str | None = None
    legacy: bool = False
    created_block: int = 0
    updated_block: int = 0
    # which event ended the job with a verdict: "JobCompleted" / "JobRejected"
    verdict_event: str | None = None
    refunded_amount: int = 0
    paid_amount: int = 0
    # ERC8183.sol dialect: partial settlement, payout receiver and the pending claim
    settled_amount: int = 0
    payout_receiver: str | None = None
    pending_claim_amount: int | None = None  # cumulative amount of the claim awaiting a verdict
    # the dialect the job's own events are in: "erc8183", "agentic_commerce" or "legacy"
    dialect: str = ""

    @property
    def refundable_amount(self) -> int:
        """What claimRefund would return to the client now: the unsettled escrow, if funded."""
        if self.status in (JobStatus.FUNDED, JobStatus.SUBMITTED):
            return max(self.budget - self.settled_amount, 0)
        return 0


@dataclass(slots=True)
class TaskState:
    """Projection of one task-market task (table ``tasks``)."""

    contract: str
    task_id: str
    requester: str = ""
    worker: str | None = None
    reward: int = 0
    mode: str = ""
    expiry_time: int = 0
    status: TaskStatus = TaskStatus.OPEN
    deliverable: str | None = None
    evaluator: str | None = None
    evaluator_stake: int = 0
    evaluator_fee_bps: int = 0
    evaluation_window: int = 0
    appeal_window: int = 0
    dispute_resolver: str | None = None
    submitted_at: int | None = None
    evaluation_deadline: int | None = None
    evaluated_at: int | None = None
    appeal_deadline: int | None = None
    verdict_type: VerdictType | None = None
    score: int | None = None
    evidence_hash: str | None = None
    paid_amount: int = 0
    refunded_amount: int = 0
    created_block: int = 0
    updated_block: int = 0
    extra: dict[str, str] = field(default_factory=dict)
