"""A small, known escrow history written through the real store API, for API tests.

Logs are ABI-encoded with eth_abi from the event catalog's signatures, decoded
by the real decoder and committed with ``IndexStore.apply_batch``; keeper
intents go through ``IntentStore``. The facts the tests assert on are
returned in :class:`World`, so no test hard-codes what the store computed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_utils.crypto import keccak
from support.abi_events import encode_event

from keeper.domain.event_catalog import spec_for
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, ChainRead, Log, Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.domain.reads import reads_for
from keeper.store import verifications as vstore
from keeper.store.db import connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.intents import IntentStore
from keeper.store.migrations import migrate
from keeper.verify.canonical import canonical_bytes, keccak_hex

CHAIN_ID = 31337
ACP = "0x" + "a1" * 20
TM = "0x" + "b2" * 20
USDC = "0x" + "70" * 20
CLIENTS = ("0x" + "c1" * 20, "0x" + "c2" * 20)
PROVIDER = "0x" + "d1" * 20
EVALUATOR = "0x" + "e1" * 20
WORKER = "0x" + "f1" * 20
CONTRACTS = {"acp": ACP, "tm": TM}
PROTOCOLS = {ACP: Protocol.ERC8183, TM: Protocol.TASKMARKET}
GENESIS_TS = 1_700_000_000
BUDGET = 2**200 + 7  # far beyond float precision: must come back exact


def block_hash(number: int) -> str:
    return "0x" + keccak(text=f"api-world:{number}").hex()


def task_id(n: int) -> str:
    return "0x" + f"{n:064x}"


@dataclass
class World:
    """What was written, for tests to compare the API against."""

    path: Path
    jobs: dict[str, str] = field(default_factory=dict)  # job id -> expected status
    clients: dict[str, str] = field(default_factory=dict)  # job id -> client
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> expected status
    reasons: dict[str, str] = field(default_factory=dict)  # job id -> verdict reason
    head: BlockHeader | None = None
    intent_job: str = ""
    verified_job: str = ""
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)  # job id -> verdict doc
    report_digest: str = ""


class _Chain:
    def __init__(self) -> None:
        self.number = 100
        self.blocks: list[BlockHeader] = []
        self.logs: list[Log] = []

    def block(self) -> BlockHeader:
        self.number += 1
        parent = block_hash(self.number - 1)
        header = BlockHeader(
            self.number, block_hash(self.number), parent, GENESIS_TS + 12 * self.number
        )
        self.blocks.append(header)
        return header

    def emit(self, contract: str, name: str, values: dict[str, Any]) -> None:
        header = self.blocks[-1]
        topics, data = encode_event(spec_for(name), values)
        index = sum(1 for log in self.logs if log.block_number == header.number)
        tx = "0x" + keccak(text=f"{header.hash}:{index}").hex()
        self.logs.append(Log(contract, topics, data, header.number, header.hash, tx, index, index))


def _job_story(chain: _Chain, world: World, job: int) -> None:
    """Job ``job`` walks a lifecycle chosen by its id, one block per step."""
    jid = str(job)
    client = CLIENTS[job % 2]
    world.clients[jid] = client
    chain.block()
    expiry = GENESIS_TS + 10**6
    created = {"jobId": job, "client": client, "provider": PROVIDER, "evaluator": EVALUATOR,
               "expiredAt": expiry, "hook": "0x" + "00" * 20}  # fmt: skip
    chain.emit(ACP, "JobCreated", created)
    chain.emit(ACP, "BudgetSet", {"jobId": job, "token": USDC, "amount": BUDGET})
    world.jobs[jid] = "open"
    if job % 5 == 0:
        return
    chain.emit(ACP, "JobFunded", {"jobId": job, "client": client, "amount": BUDGET})
    world.jobs[jid] = "funded"
    if job % 5 == 1:
        return
    chain.block()
    chain.emit(
        ACP, "JobSubmitted", {"jobId": job, "provider": PROVIDER, "deliverable": "0x" + "dd" * 32}
    )
    world.jobs[jid] = "submitted"
    if job % 5 == 2:
        return
    esito = "complete" if job % 5 == 3 else "reject"
    document: dict[str, Any] = {"evaluator": "SchemaEval", "version": 1, "jobId": jid,
                "deliverable": "0x" + "dd" * 32, "esito": esito, "motivi": []}  # fmt: skip
    reason = keccak_hex(canonical_bytes(document))
    world.reasons[jid] = reason
    world.documents[jid] = document
    if job % 5 == 3:
        chain.emit(ACP, "JobCompleted", {"jobId": job, "evaluator": EVALUATOR, "reason": reason})
        world.jobs[jid] = "completed"
    else:
        chain.emit(ACP, "JobRejected", {"jobId": job, "rejector": EVALUATOR, "reason": reason})
        world.jobs[jid] = "rejected"


def _task_story(chain: _Chain, world: World, n: int) -> None:
    tid = task_id(n)
    chain.block()
    expiry = GENESIS_TS + 10**6
    chain.emit(TM, "TaskCreated", {"taskId": tid, "requester": CLIENTS[0], "reward": 10**6,
                                   "mode": "0x636c6169", "expiryTime": expiry,
                                   "stakeRequired": False, "stakeBps": 0})  # fmt: skip
    world.tasks[tid] = "open"
    if n == 1:
        return
    chain.emit(TM, "TaskClaimed", {"taskId": tid, "worker": WORKER, "stakeAmount": 5})
    world.tasks[tid] = "claimed"


def _answer(kind: str, subject: str) -> dict[str, Any]:
    if kind == "getJob":
        return {"description": f'{{"brief":"job {subject} <b>bold</b>"}}'}
    if kind == "paymentToken":
        return {"token": USDC}
    if kind == "getTaskEvaluatorConfig":
        return {"evaluator": EVALUATOR, "evaluatorStake": 5, "evaluatorFeeBps": 100,
                "evaluationWindow": 3600, "appealWindow": 600,
                "disputeResolver": CLIENTS[1]}  # fmt: skip
    return {"issued": False, "verdictType": 0, "score": 0, "confidence": 0,
            "evidenceHash": "0x" + "00" * 32}  # fmt: skip


def build_world(path: Path, jobs: int = 12, tasks: int = 3) -> World:
    """Write ``jobs`` jobs and ``tasks`` tasks and one keeper intent into a fresh database."""
    world = World(path)
    chain = _Chain()
    for job in range(1, jobs + 1):
        _job_story(chain, world, job)
    for n in range(1, tasks + 1):
        _task_story(chain, world, n)
    timestamps = {b.number: b.timestamp for b in chain.blocks}
    events = decode_logs(chain.logs, PROTOCOLS, timestamps)
    reads = [
        ChainRead(r.contract, r.subject, r.kind, r.block_number, r.block_hash,
                  _answer(r.kind, r.subject))
        for e in events for r in reads_for(e)
    ]  # fmt: skip
    conn = connect(path)
    migrate(conn)
    head = chain.blocks[-1]
    world.head = head
    IndexStore(conn, CHAIN_ID).apply_batch(
        Batch(events, chain.blocks, reads, head.number, head.hash, head.number - 2)
    )
    funded = next(j for j, s in world.jobs.items() if s == "funded")
    world.intent_job = funded
    action = Action(ACP, funded, ActionKind.CLAIM_REFUND, head.timestamp, Protocol.ERC8183)
    IntentStore(conn, CHAIN_ID).open_decisions([action], head.number, head.hash)
    _verify_one(conn, world, events)
    conn.close()
    return world


def _verify_one(conn: Any, world: World, events: list[Any]) -> None:
    """Record a verification (two report revisions and the document) for one completed job."""
    job = next(j for j, s in world.jobs.items() if s == "completed")
    event = next(e for e in events if e.name == "JobCompleted" and e.subject == job)
    world.verified_job = job
    body = canonical_bytes(world.documents[job])
    document_digest = keccak_hex(body)
    vstore.save_document(conn, CHAIN_ID, ACP, job, document_digest, body)
    parent = None
    for revision, status in ((1, "unavailable"), (2, "verified")):
        report = json.dumps({"status": status, "revisionCount": revision}, separators=(",", ":"))
        digest = "0x" + keccak(text=report).hex()
        row = vstore.VerificationRow(
            CHAIN_ID, ACP, job, status, "[]", document_digest if status == "verified" else None,
            report, digest, parent, revision, "JobCompleted", event.log.tx_hash,
            event.log.block_hash, event.log.block_number, event.log.log_index, revision,
            GENESIS_TS, None,
        )  # fmt: skip
        vstore.save_verification(conn, row, new_revision=True)
        parent = digest
        world.report_digest = digest
