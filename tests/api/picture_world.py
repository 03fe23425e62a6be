"""A day of escrow history whose pictures are known in advance, for the status-page tests.

Written like :mod:`api_world` (ABI-encoded logs, the real decoder,
``IndexStore.apply_batch``, ``IntentStore``, the verify store), but with block
times spread over the last day, deadlines ahead of the head, finished keeper
intents and failed verifications. :class:`Story` keeps what was written, so a
test computes the expected picture from the story, never from the store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api_world import ACP, CHAIN_ID, CLIENTS, EVALUATOR, PROTOCOLS, PROVIDER, TM, _Chain
from eth_utils.crypto import keccak

from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, ChainRead, Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.domain.reads import reads_for
from keeper.store import verifications as vstore
from keeper.store.db import connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.intents import IntentStore
from keeper.store.migrations import migrate
from keeper.store.tokens import TokenMeta, save_token_meta

HEAD_TS = 1_700_086_400  # a Wednesday, 22:13:20 UTC
HOUR = 3600
USDC = "0x" + "70" * 20  # answers decimals() = 6, symbol() = "USDC"
MUTE = "0x" + "71" * 20  # answers neither: stays in base units
UNIT = 10**6


@dataclass
class Story:
    """What the world holds: per job its token, amount, funding and exit times."""

    path: Path
    head: BlockHeader | None = None
    jobs: dict[int, tuple[str, int, int, int | None]] = field(default_factory=dict)
    tasks: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (reward, created)
    verifications: dict[int, str] = field(default_factory=dict)  # job -> status
    outcomes: dict[str, list[int]] = field(default_factory=dict)  # outcome -> times
    due: dict[str, int] = field(default_factory=dict)  # "contract:subject" -> due_at

    def locked_at(self, token: str, t: int) -> int:
        """Escrow the story holds in ``token`` once every event at or before ``t`` happened."""
        return sum(
            amount
            for tok, amount, funded, exit_at in self.jobs.values()
            if tok == token and funded <= t and (exit_at is None or exit_at > t)
        )


class _TimedChain(_Chain):
    def block_at(self, timestamp: int) -> BlockHeader:
        header = self.block()
        header = BlockHeader(header.number, header.hash, header.parent_hash, timestamp)
        self.blocks[-1] = header
        return header


def _answer(kind: str, subject: str) -> dict[str, object]:
    if kind == "getJob":
        return {"description": f"picture job {subject}"}
    if kind == "getTaskEvaluatorConfig":
        return {"evaluator": EVALUATOR, "evaluatorStake": 5, "evaluatorFeeBps": 100,
                "evaluationWindow": 3600, "appealWindow": 600,
                "disputeResolver": CLIENTS[1]}  # fmt: skip
    return {"issued": False, "verdictType": 0, "score": 0, "confidence": 0,
            "evidenceHash": "0x" + "00" * 32}  # fmt: skip


# job -> (token, whole tokens, funded hours ago, exit (event, hours ago) or None, expiry offset)
_JOBS: dict[int, tuple[str, int, float, tuple[str, float] | None, int]] = {
    1: (USDC, 5, 20, ("JobCompleted", 10), 30 * 86400),
    2: (USDC, 3, 16, ("JobRejected", 6), 30 * 86400),
    3: (USDC, 4, 12, None, -600),  # overdue: claimRefund due, not made yet
    4: (USDC, 7, 8, None, 1800),  # due within the hour
    5: (USDC, 2, 4, None, 5 * HOUR),  # due within the day
    6: (USDC, 1, 1, None, 3 * 86400),  # due within the week
    7: (MUTE, 123_456_789, 2, None, 30 * 86400),  # a token that does not answer
    8: (USDC, 6, 7, ("JobCompleted", 5), 30 * 86400),
    9: (USDC, 9, 3, ("JobRejected", 0.5), 30 * 86400),
    10: (USDC, 8, 15, ("JobExpired", 9), -9 * HOUR - 60),
}
_VERIFY = {1: "verified", 2: "mismatch", 8: "evaluator_disagrees", 9: "unavailable"}


def build_picture_world(path: Path) -> Story:
    story = Story(path)
    chain = _TimedChain()
    moments: list[tuple[int, int, str]] = []  # (time, job, step)
    for job, (_token, _n, funded, exit_, _expiry) in _JOBS.items():
        moments.append((HEAD_TS - int(funded * HOUR), job, "fund"))
        if exit_ is not None:
            moments.append((HEAD_TS - int(exit_[1] * HOUR), job, exit_[0]))
    moments.sort()
    for ts, job, step in moments:
        chain.block_at(ts)
        token, n, _funded, exit_, expiry = _JOBS[job]
        amount = n * UNIT
        if step == "fund":
            chain.emit(ACP, "JobCreated", {"jobId": job, "client": CLIENTS[0],
                       "provider": PROVIDER, "evaluator": EVALUATOR,
                       "expiredAt": HEAD_TS + expiry, "hook": "0x" + "00" * 20})  # fmt: skip
            chain.emit(ACP, "BudgetSet", {"jobId": job, "token": token, "amount": amount})
            chain.emit(ACP, "JobFunded", {"jobId": job, "client": CLIENTS[0], "amount": amount})
            story.jobs[job] = (token, amount, ts, None)
            if exit_ is None:
                story.due[f"{ACP}:{job}"] = HEAD_TS + expiry
        else:
            reason = "0x" + keccak(text=f"verdict {job}").hex()
            if step == "JobCompleted":
                chain.emit(ACP, step, {"jobId": job, "evaluator": EVALUATOR, "reason": reason})
            elif step == "JobRejected":
                chain.emit(ACP, step, {"jobId": job, "rejector": EVALUATOR, "reason": reason})
            else:
                chain.emit(ACP, step, {"jobId": job})
                chain.emit(ACP, "Refunded", {"jobId": job, "client": CLIENTS[0], "amount": amount})
            story.jobs[job] = (token, amount, story.jobs[job][2], ts)
    task = "0x" + f"{1:064x}"
    created = HEAD_TS - 3 * HOUR
    chain.block_at(created)
    created_args = {"taskId": task, "requester": CLIENTS[0], "reward": 10**6,
                    "mode": "0x636c6169", "expiryTime": HEAD_TS + 2 * HOUR,
                    "stakeRequired": False, "stakeBps": 0}  # fmt: skip
    chain.emit(TM, "TaskCreated", created_args)
    story.tasks[task] = (10**6, created)
    story.due[f"{TM}:{task}"] = HEAD_TS + 2 * HOUR + 1
    head = chain.block_at(HEAD_TS)
    story.head = head
    timestamps = {b.number: b.timestamp for b in chain.blocks}
    events = decode_logs(chain.logs, PROTOCOLS, timestamps)
    reads = [
        ChainRead(r.contract, r.subject, r.kind, r.block_number, r.block_hash,
                  _answer(r.kind, r.subject))
        for e in events for r in reads_for(e)
    ]  # fmt: skip
    conn = connect(path)
    migrate(conn)
    IndexStore(conn, CHAIN_ID).apply_batch(
        Batch(events, chain.blocks, reads, head.number, head.hash, head.number - 2)
    )
    save_token_meta(conn, CHAIN_ID, TokenMeta(USDC, 6, "USDC"), head.number)
    save_token_meta(conn, CHAIN_ID, TokenMeta(MUTE, None, None), head.number)
    _finish_intents(conn, story, events, head)
    for job, status in _VERIFY.items():
        _verify(conn, story, events, job, status)
    conn.close()
    return story


def _finish_intents(conn: Any, story: Story, events: list[Any], head: BlockHeader) -> None:
    """One confirmed refund (job 10, at its JobExpired block), one preempted, one failed."""
    store = IntentStore(conn, CHAIN_ID)
    expired = next(e for e in events if e.name == "JobExpired")
    confirmed = Action(ACP, "10", ActionKind.CLAIM_REFUND, HEAD_TS - 9 * HOUR - 60,
                       Protocol.ERC8183)  # fmt: skip
    preempted = Action(ACP, "901", ActionKind.CLAIM_REFUND, HEAD_TS - 3 * HOUR, Protocol.ERC8183)
    failed = Action(TM, "0x" + f"{9:064x}", ActionKind.FINALIZE_VERDICT, HEAD_TS - 2 * HOUR,
                    Protocol.TASKMARKET)  # fmt: skip
    ids = {a.subject: i.id for a, i in zip(
        (confirmed, preempted, failed),
        store.open_decisions([confirmed, preempted, failed], head.number, head.hash),
        strict=True,
    )}  # fmt: skip
    store.set_outcome(
        [ids["10"]], "confirmed", status="done", tx_hash=expired.log.tx_hash,
        receipt_block=expired.log.block_number, receipt_hash=expired.log.block_hash,
    )  # fmt: skip
    store.set_outcome([ids["901"]], "preempted", status="done")
    store.set_outcome([ids[failed.subject]], "reverted", status="done", detail="reverted")
    story.outcomes = {
        "confirmed": [expired.block_timestamp],
        "preempted": [preempted.due_at],
        "failed": [failed.due_at],
    }


def _verify(conn: Any, story: Story, events: list[Any], job: int, status: str) -> None:
    event = next(
        e for e in events
        if e.name in ("JobCompleted", "JobRejected") and e.subject == str(job)
    )  # fmt: skip
    report = json.dumps({"status": status, "revisionCount": 1}, separators=(",", ":"))
    row = vstore.VerificationRow(
        CHAIN_ID, ACP, str(job), status, "[]", None, report, "0x" + keccak(text=report).hex(),
        None, 1, event.name, event.log.tx_hash, event.log.block_hash, event.log.block_number,
        event.log.log_index, 1, HEAD_TS, None,
    )  # fmt: skip
    vstore.save_verification(conn, row, new_revision=True)
    story.verifications[job] = status
