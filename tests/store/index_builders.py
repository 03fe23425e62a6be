"""A synthetic chain for store tests: real ABI-encoded logs, forks, reads, batches."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from eth_utils.crypto import keccak
from support.abi_events import encode_event

from keeper.domain.event_catalog import spec_for
from keeper.domain.events import decode_logs
from keeper.domain.model import ArgValue, BlockHeader, ChainRead, Event, Log, Protocol
from keeper.domain.reads import reads_for
from keeper.store.index_store import Batch

JOBS = "0x" + "a1" * 20
LEGACY_JOBS = "0x" + "a2" * 20
TASKS = "0x" + "b2" * 20
TOKEN = "0x" + "70" * 20
PROTOCOLS = {JOBS: Protocol.ERC8183, LEGACY_JOBS: Protocol.ERC8183, TASKS: Protocol.TASKMARKET}
ACTORS = ["0x" + f"{i:040x}" for i in range(1, 6)]


def block_hash(number: int, fork: str = "") -> str:
    return "0x" + keccak(text=f"{fork}:{number}").hex()


def encode_log(
    contract: str, name: str, variant: str, values: dict[str, Any], block: BlockHeader, index: int
) -> Log:
    """ABI-encode one event with eth_abi (independent of the decoder under test)."""
    topics, data = encode_event(spec_for(name, variant), values)
    tx = "0x" + keccak(text=f"{block.hash}:{index}").hex()
    return Log(contract, topics, data, block.number, block.hash, tx, index, index)


def answer(req_kind: str, subject: str) -> dict[str, ArgValue]:
    """What a view call returns in this synthetic world."""
    if req_kind == "getJob":
        return {"description": f'{{"brief":"job {subject}"}}'}
    if req_kind == "paymentToken":
        return {"token": TOKEN}
    if req_kind == "getTaskEvaluatorConfig":
        return {
            "evaluator": ACTORS[2],
            "evaluatorStake": 5,
            "evaluatorFeeBps": 100,
            "evaluationWindow": 3600,
            "appealWindow": 600,
            "disputeResolver": ACTORS[3],
        }
    return {
        "issued": True,
        "verdictType": 0,
        "score": 99,
        "confidence": 80,
        "evidenceHash": "0x" + "e0" * 32,
    }


@dataclass
class SynthBlock:
    header: BlockHeader
    events: list[Event]
    reads: list[ChainRead]


@dataclass
class Synth:
    """Generates blocks with job and task lifecycles; ``fork`` salts the block hashes."""

    seed: int = 1
    events_per_block: int = 6
    fork: str = ""
    # None: follow-up events hit any subject ever created (worst case for
    # rebuilds); N: only the N most recent, like real jobs that live briefly
    locality: int | None = None
    rng: random.Random = field(init=False)
    next_job: int = 1
    next_task: int = 1
    job_contract: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}:{self.fork}")

    def _low(self, upper: int) -> int:
        """Lowest id a follow-up event may pick: any, or only the `locality` most recent."""
        return 1 if self.locality is None else max(1, upper - self.locality)

    def switch_fork(self, name: str) -> None:
        """From now on build a different branch: new hashes and different events."""
        self.fork = name
        self.rng = random.Random(f"{self.seed}:{name}")

    def blocks(self, first: int, last: int, parent: str | None = None) -> list[SynthBlock]:
        out: list[SynthBlock] = []
        prev = parent if parent is not None else block_hash(first - 1, self.fork)
        for n in range(first, last + 1):
            header = BlockHeader(n, block_hash(n, self.fork), prev, 1_700_000_000 + 12 * n)
            prev = header.hash
            logs = [self._random_log(header, i) for i in range(self.events_per_block)]
            events = decode_logs(logs, PROTOCOLS, {n: header.timestamp})
            reads = [
                ChainRead(
                    r.contract,
                    r.subject,
                    r.kind,
                    r.block_number,
                    r.block_hash,
                    answer(r.kind, r.subject),
                )
                for e in events
                for r in reads_for(e)
            ]
            out.append(SynthBlock(header, events, reads))
        return out

    def _random_log(self, b: BlockHeader, i: int) -> Log:
        r = self.rng
        roll = r.random()
        a = ACTORS
        if roll < 0.05:  # a log we do not know: kept raw
            return Log(
                JOBS, ("0x" + "ee" * 32,), b"\x01" * 7, b.number, b.hash, "0x" + "00" * 32, i, i
            )
        if roll < 0.5:
            if self.next_job == 1 or r.random() < 0.3:
                job = self.next_job
                self.next_job += 1
                contract = LEGACY_JOBS if r.random() < 0.25 else JOBS
                self.job_contract[job] = contract
                legacy = contract == LEGACY_JOBS
                values: dict[str, Any] = {
                    "jobId": job,
                    "client": a[0],
                    "provider": a[1],
                    "evaluator": a[2],
                    "expiredAt": b.timestamp + 7200,
                }
                if legacy:
                    return encode_log(contract, "JobCreated", "legacy", values, b, i)
                return encode_log(contract, "JobCreated", "current", values | {"hook": a[4]}, b, i)
            job = r.randrange(self._low(self.next_job), self.next_job)
            contract = self.job_contract[job]
            legacy = contract == LEGACY_JOBS
            name = r.choice(
                [
                    "BudgetSet",
                    "BudgetSet",
                    "JobFunded",
                    "JobSubmitted",
                    "JobCompleted",
                    "JobRejected",
                    "JobExpired",
                    "Refunded",
                    "PaymentReleased",
                ]
            )
            amount = r.choice([1, 10**6, 2**256 - 1])
            if name == "BudgetSet":
                if legacy:
                    return encode_log(
                        contract, name, "legacy", {"jobId": job, "amount": amount}, b, i
                    )
                return encode_log(
                    contract,
                    name,
                    "current",
                    {"jobId": job, "token": TOKEN, "amount": amount},
                    b,
                    i,
                )
            values = {
                "jobId": job,
                "client": a[0],
                "provider": a[1],
                "evaluator": a[2],
                "rejector": a[2],
                "amount": amount,
                "deliverable": "0x" + "d0" * 32,
                "reason": "0x" + f"{job:064x}",
            }
            return encode_log(contract, name, "current", values, b, i)
        if self.next_task == 1 or r.random() < 0.3:
            task = "0x" + f"{self.next_task:064x}"
            self.next_task += 1
            return encode_log(
                TASKS,
                "TaskCreated",
                "current",
                {
                    "taskId": task,
                    "requester": a[0],
                    "reward": 10**6,
                    "mode": "0x636c6169",
                    "expiryTime": b.timestamp + 999,
                    "stakeRequired": True,
                    "stakeBps": 500,
                },
                b,
                i,
            )
        task = "0x" + f"{r.randrange(self._low(self.next_task), self.next_task):064x}"
        name = r.choice(
            [
                "EvaluatorAssigned",
                "TaskClaimed",
                "TaskSubmitted",
                "TaskEvaluated",
                "TaskAppealed",
                "TaskCompleted",
                "TaskReopened",
                "TaskExpired",
            ]
        )
        values = {
            "taskId": task,
            "evaluator": a[2],
            "stakeAmount": 5,
            "worker": a[1],
            "deliverable": "0x" + "d1" * 32,
            "verdictType": 0,
            "score": 99,
            "appellant": a[1],
            "requester": a[0],
            "workerPayment": 900,
            "platformFee": 10,
            "refundAmount": 10**6,
        }
        return encode_log(TASKS, name, "current", values, b, i)


def batch_of(blocks: list[SynthBlock], finalized: int, window: bool = True) -> Batch:
    """One batch covering ``blocks``; window blocks included unless ``window`` is False."""
    return Batch(
        events=[e for b in blocks for e in b.events],
        blocks=[b.header for b in blocks] if window else [],
        reads=[r for b in blocks for r in b.reads],
        indexed_block=blocks[-1].header.number,
        indexed_hash=blocks[-1].header.hash,
        finalized_block=finalized,
    )
