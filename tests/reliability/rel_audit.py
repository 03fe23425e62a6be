"""After-the-fact checks on the chain and the database, independent of the keeper's own books.

- ``audit_keeper``: every transaction the keeper's addresses (one, or several
  sharing the work) got mined on the canonical chain, decoded from its
  calldata (single calls and Multicall3 batches), with the subjects it
  actually moved (a log from the target contract whose first indexed topic is
  the subject);
- ``effect_repeats``: keeper-only effect events (JobExpired, TaskExpired,
  EvaluatorTimedOut) seen more than once for one subject in an index;
- ``due_now``: what the planner would still do at the node's head, computed
  from a fresh index of the chain (so it does not trust the daemon's tables);
- ``adopt_silent_endings``: the daemon's observations of tasks that ended with no
  event, each first checked on the chain, given to a fresh index (which, having no
  keeper, cannot make them);
- ``integrity``: SQLite's own ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_abi.abi import decode
from eth_utils.crypto import keccak
from sync_support import Harness

from keeper.devnet.anvil import rpc_call
from keeper.domain.model import TaskStatus
from keeper.domain.planner import Action, PlannerConfig, plan
from keeper.domain.reads import FINALIZE_SILENT, RESOLVE_SILENT
from keeper.domain.views import decode_view, encode_view
from keeper.store import verifications
from keeper.store.db import connect
from keeper.store.queries import pause_state
from keeper.store.states import due_jobs, due_tasks

__all__ = [
    "KeeperAudit",
    "adopt_silent_endings",
    "audit_keeper",
    "denied_in",
    "due_now",
    "effect_repeats",
    "integrity",
    "stale_open_intents",
    "unsettled_intents",
]

ActionKey = tuple[str, str, str]  # (contract, subject, action)


def _sel(signature: str) -> str:
    return keccak(text=signature)[:4].hex()


_ACTIONS: dict[str, tuple[str, str]] = {
    _sel("claimRefund(uint256)"): ("claimRefund", "uint256"),
    _sel("claimRefund(uint256,bytes)"): ("claimRefund", "uint256"),
    _sel("finalizeVerdict(bytes32)"): ("finalizeVerdict", "bytes32"),
    _sel("refundExpired(bytes32)"): ("refundExpired", "bytes32"),
    _sel("refundExpired(bytes32,uint256)"): ("refundExpired", "bytes32"),
    _sel("evaluatorTimeout(bytes32)"): ("evaluatorTimeout", "bytes32"),
}
_AGGREGATE3 = _sel("aggregate3((address,bool,bytes)[])")
KEEPER_EFFECTS = ("JobExpired", "TaskExpired", "EvaluatorTimedOut")


def _subject(kind: str, word: bytes) -> str:
    return str(int.from_bytes(word, "big")) if kind == "uint256" else "0x" + word.hex()


def decode_calls(to: str, data: bytes) -> list[ActionKey]:
    """The (contract, subject, action) triples one keeper transaction asked for."""
    head, body = data[:4].hex(), data[4:]
    if head in _ACTIONS:
        action, kind = _ACTIONS[head]
        return [(to, _subject(kind, body[:32]), action)]
    if head == _AGGREGATE3:
        (calls,) = decode(["(address,bool,bytes)[]"], body)
        out: list[ActionKey] = []
        for target, _allow, inner in calls:
            out += decode_calls(str(target).lower(), bytes(inner))
        return out
    return []  # a cancel (zero-value self-transfer) or something unknown


@dataclass
class KeeperAudit:
    """What the keeper's address did on the canonical chain, in block order.

    A send is a *duplicate* when it is mined after its action already took
    effect on the canonical chain: the keeper should have known. A send that
    failed before the action took effect (say, a reorg moved chain time back
    under a deadline, so the call reverted with WrongStatus) is *wasted* gas,
    not a duplicate: a later decision to try again is the keeper doing its job.
    """

    txs: int = 0
    cancels: int = 0
    reverted: int = 0
    per_nonce: Counter[tuple[str, int]] = field(default_factory=Counter)  # (sender, nonce)
    mined: Counter[ActionKey] = field(default_factory=Counter)
    effective: Counter[ActionKey] = field(default_factory=Counter)
    late: Counter[ActionKey] = field(default_factory=Counter)
    # each mined send that did not take effect and was not late: what, where and how
    missed: list[str] = field(default_factory=list)

    @property
    def duplicate_sends(self) -> int:
        """Mined sends of an action that had already taken effect."""
        return sum(self.late.values())

    @property
    def wasted_sends(self) -> int:
        """Mined sends that failed before their action took effect (then retried)."""
        return sum(self.mined.values()) - sum(self.effective.values()) - self.duplicate_sends

    @property
    def double_executions(self) -> int:
        """Intents that more than one mined transaction actually carried out."""
        return sum(n - 1 for n in self.effective.values() if n > 1)

    def repeats(self) -> dict[ActionKey, int]:
        return {k: n for k, n in self.mined.items() if self.late[k] or self.effective[k] > 1}


def audit_keeper(
    url: str, keeper: str | Collection[str], first_block: int, last_block: int
) -> KeeperAudit:
    """Walk blocks ``first_block..last_block`` and audit every transaction from ``keeper``
    (or from any of several keepers, in one block order: a send by one after another's
    took effect is a duplicate too)."""
    senders = {keeper.lower()} if isinstance(keeper, str) else {k.lower() for k in keeper}
    out = KeeperAudit()
    for number in range(first_block, last_block + 1):
        block: dict[str, Any] = rpc_call(url, "eth_getBlockByNumber", [hex(number), True])
        for tx in block["transactions"]:
            sender = str(tx["from"]).lower()
            if sender not in senders:
                continue
            out.txs += 1
            out.per_nonce[sender, int(tx["nonce"], 16)] += 1
            to = str(tx.get("to") or "").lower()
            calls = decode_calls(to, bytes.fromhex(str(tx["input"])[2:]))
            if not calls:
                out.cancels += 1
                continue
            receipt = rpc_call(url, "eth_getTransactionReceipt", [tx["hash"]])
            worked = int(receipt["status"], 16) == 1
            if not worked:
                out.reverted += 1
            # a call sent alone worked only if it acted (each action reverts otherwise),
            # with or without a log: a finalize paying no award emits none
            alone = not str(tx["input"]).startswith("0x" + _AGGREGATE3)
            moved = {
                (str(log["address"]).lower(), str(log["topics"][1]).lower())
                for log in receipt["logs"]
                if len(log["topics"]) > 1
            }
            for key in calls:
                if out.effective[key]:
                    out.late[key] += 1
                out.mined[key] += 1
                contract, subject, _ = key
                topic = (
                    "0x"
                    + (
                        bytes.fromhex(subject[2:])
                        if subject.startswith("0x")
                        else int(subject).to_bytes(32, "big")
                    ).hex()
                )
                if worked and (alone or (contract, topic) in moved):
                    out.effective[key] += 1
                elif not out.late[key]:
                    how = "alone" if alone else "in a batch"
                    status = "worked" if worked else "reverted"
                    out.missed.append(
                        f"{key[2]} {subject[:12]} at block {number}, {how}, {status}, no effect"
                    )
    return out


def effect_repeats(conn: sqlite3.Connection) -> list[tuple[str, str, str, int]]:
    """Keeper-only effect events that occur more than once for one subject."""
    marks = ",".join("?" * len(KEEPER_EFFECTS))
    rows = conn.execute(
        f"SELECT contract, subject, name, COUNT(*) FROM events WHERE name IN ({marks}) "
        "GROUP BY contract, subject, name HAVING COUNT(*) > 1",
        KEEPER_EFFECTS,
    ).fetchall()
    return [tuple(r) for r in rows]


def effect_count(conn: sqlite3.Connection) -> int:
    marks = ",".join("?" * len(KEEPER_EFFECTS))
    row = conn.execute(
        f"SELECT COUNT(*) FROM events WHERE name IN ({marks})", KEEPER_EFFECTS
    ).fetchone()
    return int(row[0])


async def due_now(
    fresh: Harness,
    denied: Collection[tuple[str, str, str]],
    hook_blocked: Mapping[tuple[str, str], int] | None = None,
) -> list[Action]:
    """Actions the planner would take at the node's head, from an index brought up to it.

    Like the daemon's keeper, nothing is due on a contract paused at that head (the
    traffic may stop before its admin unpauses), nor on a job whose hook blocked the
    refund (the traffic may stop before the admin detaches it).
    """
    await fresh.to_head()
    head = await fresh.rpc.get_block("latest")
    assert head is not None
    chain_id = fresh.cfg.chain.chain_id
    paused = set()
    for c in fresh.cfg.contracts:
        state = pause_state(fresh.conn, c.address, chain_id=chain_id)
        if state is not None and state[0]:
            paused.add(c.address)
    result = plan(
        due_jobs(fresh.conn, chain_id, head.timestamp),
        due_tasks(fresh.conn, chain_id, head.timestamp), head,
        PlannerConfig(), denied, paused=paused, hook_blocked=hook_blocked,
    )  # fmt: skip
    return result.actions


def hook_blocked_in(db: Path | str) -> dict[tuple[str, str], int]:
    """Jobs whose hook blocked the daemon's refund (ended hook_blocked, see IntentStore)."""
    conn = connect(db)
    try:
        rows = conn.execute(
            "SELECT contract, subject, decided_block FROM keeper_intents "
            "WHERE outcome = 'reverted_in_simulation' AND detail LIKE 'hook_blocked%'"
        ).fetchall()
        return {(str(a), str(b)): int(n) for a, b, n in rows}
    finally:
        conn.close()


def denied_in(db: Path | str) -> set[tuple[str, str, str]]:
    """Actions the daemon's keeper was refused (the planner routes around them)."""
    conn = connect(db)
    try:
        rows = conn.execute(
            "SELECT contract, subject, action FROM keeper_intents WHERE outcome = 'not_permitted'"
        ).fetchall()
        return {(str(a), str(b), str(c)) for a, b, c in rows}
    finally:
        conn.close()


def unsettled_intents(db: Path | str) -> list[tuple[Any, ...]]:
    """Intents of the daemon's keeper with a transaction whose fate is still open."""
    conn = connect(db)
    try:
        return conn.execute(
            "SELECT contract, subject, action, status, outcome FROM keeper_intents "
            "WHERE status = 'inflight' OR (status = 'open' AND attempts > 0)"
        ).fetchall()
    finally:
        conn.close()


def stale_open_intents(db: Path) -> list[tuple[Any, ...]]:
    """Intents decided but never simulated nor sent (e.g. the process died in between)."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT contract, subject, action FROM keeper_intents "
            "WHERE status = 'open' AND attempts = 0"
        ).fetchall()
    finally:
        conn.close()


def verification_gaps(db: Path | str, chain_id: int) -> list[tuple[Any, ...]]:
    """Verifications of verdicts the index no longer has, and indexed verdicts not verified.

    What the verifier must leave after any mix of reorgs and restarts; the
    unverified are looked for from the first event on (no resumed position).
    """
    conn = connect(db)
    try:
        orphans = conn.execute(
            "SELECT 'orphan', contract, job_id, block_number FROM verifications v "
            "WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.chain_id = v.chain_id "
            "AND e.block_number = v.block_number AND e.block_hash = v.block_hash "
            "AND e.log_index = v.log_index)"
        ).fetchall()
        pending = [
            ("unverified", v.contract, v.job_id, v.block_number)
            for v in verifications.pending_verdicts(conn, chain_id, 10)
        ] + [
            ("unverified", t.contract, t.task_id, t.block_number)
            for t in verifications.pending_task_verdicts(conn, chain_id, 10)
        ]
        return [tuple(r) for r in orphans] + pending
    finally:
        conn.close()


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def adopt_silent_endings(db: Path | str, fresh: Harness, url: str) -> int:
    """Give ``fresh`` the daemon's observations of silent endings; how many it has.

    Each must be at a block of the canonical chain, where the chain's ``getTask`` says
    the task is Accepted: an observation the chain does not bear out fails the run
    here. The fresh index stores them as the daemon's keeper did and rebuilds, so its
    tables and its planner (``due_now``) see those tasks ended.
    """
    conn = connect(db)
    try:
        rows = conn.execute(
            "SELECT chain_id, contract, subject, kind, block_number, block_hash, result_json, "
            "source FROM chain_reads WHERE kind IN (?, ?)",
            (FINALIZE_SILENT, RESOLVE_SILENT),
        ).fetchall()
    finally:
        conn.close()
    for _cid, contract, subject, kind, number, block_hash, _result, _source in rows:
        block = rpc_call(url, "eth_getBlockByNumber", [hex(number), False])
        assert str(block["hash"]) == block_hash, (kind, subject, number, "not canonical")
        call = {"to": contract, "data": "0x" + encode_view("getTask", subject).hex()}
        answer = rpc_call(url, "eth_call", [call, hex(number)])
        status = decode_view("getTask", bytes.fromhex(str(answer)[2:]))["status"]
        assert status == TaskStatus.ACCEPTED, (kind, subject, number, status)
    added = fresh.conn.executemany(
        "INSERT INTO chain_reads (chain_id, contract, subject, kind, block_number, "
        "block_hash, result_json, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        [tuple(row) for row in rows],
    ).rowcount
    fresh.conn.commit()
    if added:
        fresh.store.rebuild_all()
    return len(rows)
