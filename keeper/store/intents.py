"""SQL of the keeper's intents and attempts (tables of ``schema_keeper``).

Every multi-row change runs in one ``BEGIN IMMEDIATE`` transaction: an attempt
and its links to intents appear together or not at all, so a crash can never
leave a signed transaction that no intent claims. No ``await`` happens inside
a transaction (callers are async, this module is not), so two coroutines on
one connection cannot interleave their writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from keeper.domain.planner import Action
from keeper.domain.settlement import ACTIVE_ATTEMPT
from keeper.store.claims import ClaimLostError, Claims, UpsertClaim
from keeper.store.db import Db, DbRow, write_transaction

__all__ = [
    "ACTIVE_ATTEMPT",
    "FINAL_OUTCOMES",
    "Attempt",
    "AttemptStatus",
    "Intent",
    "IntentKey",
    "IntentStore",
    "Outcome",
]

Outcome: TypeAlias = Literal[
    "confirmed",
    "preempted",
    "not_permitted",
    "reverted_in_simulation",
    "reverted",
    "dropped",
    "fee_cap",
]
AttemptStatus: TypeAlias = Literal[
    "signed", "sent", "mined", "confirmed", "replaced", "dropped", "failed"
]
IntentKey: TypeAlias = tuple[str, str, str]  # (contract, subject, action)

# Outcomes that end an intent ('fee_cap' only marks an intent still waiting).
FINAL_OUTCOMES: Final = frozenset(
    {"confirmed", "preempted", "not_permitted", "reverted_in_simulation", "reverted", "dropped"}
)


@dataclass(frozen=True, slots=True)
class Intent:
    id: int
    contract: str
    subject: str
    action: str
    protocol: str
    status: str  # open | inflight | done
    outcome: str | None
    detail: str | None
    due_at: int
    decided_block: int
    decided_hash: str
    tx_hash: str | None
    receipt_block: int | None
    attempts: int
    claimed_by: str | None = None

    @property
    def key(self) -> IntentKey:
        return (self.contract, self.subject, self.action)


@dataclass(frozen=True, slots=True)
class Attempt:
    id: int
    signer: str
    nonce: int
    kind: str  # call | batch | cancel
    to_address: str
    data: bytes
    max_fee: int
    tip: int
    gas_limit: int
    raw_tx: bytes
    tx_hash: str
    status: str
    sent_block: int | None
    receipt_block: int | None
    receipt_hash: str | None
    receipt_status: int | None


def _intent(row: DbRow) -> Intent:
    return Intent(
        id=int(row["id"]),
        contract=row["contract"],
        subject=row["subject"],
        action=row["action"],
        protocol=row["protocol"],
        status=row["status"],
        outcome=row["outcome"],
        detail=row["detail"],
        due_at=int(row["due_at"]),
        decided_block=int(row["decided_block"]),
        decided_hash=row["decided_hash"],
        tx_hash=row["tx_hash"],
        receipt_block=row["receipt_block"],
        attempts=int(row["attempts"]),
        claimed_by=row["claimed_by"],
    )


def _attempt(row: DbRow) -> Attempt:
    return Attempt(
        id=int(row["id"]),
        signer=row["signer"],
        nonce=int(row["nonce"]),
        kind=row["kind"],
        to_address=row["to_address"],
        data=bytes.fromhex(row["data"][2:]),
        max_fee=int(row["max_fee"]),
        tip=int(row["tip"]),
        gas_limit=int(row["gas_limit"]),
        raw_tx=bytes.fromhex(row["raw_tx"][2:]),
        tx_hash=row["tx_hash"],
        status=row["status"],
        sent_block=row["sent_block"],
        receipt_block=row["receipt_block"],
        receipt_hash=row["receipt_hash"],
        receipt_status=row["receipt_status"],
    )


def _chunks(items: Sequence[Any], size: int = 400) -> Iterator[Sequence[Any]]:
    """SQLite caps bound parameters per statement; chunk IN (...) lists."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


class IntentStore:
    """The keeper's persistent state for one chain."""

    def __init__(
        self,
        conn: Db,
        chain_id: int,
        clock: Callable[[], float] = time.time,
        claims: Claims | None = None,
    ) -> None:
        self.conn = conn
        self.chain_id = chain_id
        self._clock = clock
        # a keeper that sends holds a claim on each intent it acts on (keeper.store.claims)
        self.claims = claims

    def _tx(self) -> AbstractContextManager[Db]:
        return write_transaction(self.conn)

    # ------------------------------------------------------------------ intents

    def intents_for(self, keys: Iterable[IntentKey]) -> dict[IntentKey, Intent]:
        """Existing intents for the given keys (missing keys are absent)."""
        wanted = set(keys)
        if not wanted:
            return {}
        contracts = sorted({k[0] for k in wanted})
        out: dict[IntentKey, Intent] = {}
        for part in _chunks(contracts):
            marks = ",".join("?" * len(part))
            rows = self.conn.execute(
                f"SELECT * FROM keeper_intents WHERE chain_id = ? AND contract IN ({marks})",
                (self.chain_id, *part),
            ).fetchall()
            for row in rows:
                intent = _intent(row)
                if intent.key in wanted:
                    out[intent.key] = intent
        return out

    def intents(self, ids: Iterable[int]) -> list[Intent]:
        id_list = sorted(set(ids))
        out: list[Intent] = []
        for part in _chunks(id_list):
            marks = ",".join("?" * len(part))
            rows = self.conn.execute(
                f"SELECT * FROM keeper_intents WHERE id IN ({marks}) ORDER BY id", tuple(part)
            ).fetchall()
            out += [_intent(r) for r in rows]
        return out

    def open_intents(self) -> list[Intent]:
        """Intents decided but not in flight: waiting for a simulation, a send or a fee.

        With claims, only those this keeper holds or may take: another keeper's
        live claim is that keeper's to decide.
        """
        sql = "SELECT * FROM keeper_intents WHERE chain_id = ? AND status = 'open'"
        args: tuple[Any, ...] = (self.chain_id,)
        if self.claims is not None:
            sql += f" AND {self.claims.takeable()}"
            args += (self.claims.claimant,)
        rows = self.conn.execute(sql + " ORDER BY id", args).fetchall()
        return [_intent(r) for r in rows]

    def highest_decided_block(self) -> int:
        """The newest head any intent was decided at (-1 before the first decision)."""
        row = self.conn.execute(
            "SELECT MAX(decided_block) FROM keeper_intents WHERE chain_id = ?", (self.chain_id,)
        ).fetchone()
        return -1 if row[0] is None else int(row[0])

    def open_decisions(
        self, actions: Sequence[Action], block: int, block_hash: str
    ) -> list[Intent]:
        """Write (or re-open) one intent per action, decided at ``block``; return them in order.

        This is the write that must precede any signing. An existing intent is
        re-opened with the new decision, keeping its id and attempt count.

        With claims, the same statement takes the intent's claim, and changes
        nothing of an intent another keeper holds a live claim on, one in
        flight, or one already confirmed: only the intents
        this keeper now holds, open, are returned (the others are not its to send).
        """
        now = self._clock()
        claim = UpsertClaim() if self.claims is None else self.claims.upsert()
        with self._tx() as c:
            for a in actions:
                c.execute(
                    "INSERT INTO keeper_intents (chain_id, contract, subject, action, protocol,"
                    " status, outcome, detail, due_at, decided_block, decided_hash,"
                    f" created_at, updated_at{claim.cols})"
                    f" VALUES (?, ?, ?, ?, ?, 'open', NULL, NULL, ?, ?, ?, ?, ?{claim.values})"
                    " ON CONFLICT (chain_id, contract, subject, action) DO UPDATE SET"
                    " status = 'open', outcome = NULL, detail = NULL, due_at = excluded.due_at,"
                    " decided_block = excluded.decided_block,"
                    " decided_hash = excluded.decided_hash, tx_hash = NULL,"
                    " receipt_block = NULL, receipt_hash = NULL, updated_at = excluded.updated_at"
                    f"{claim.sets}{claim.where}",
                    (
                        self.chain_id,
                        a.contract,
                        a.subject,
                        a.action.value,
                        a.protocol.value,
                        a.due_at,
                        block,
                        block_hash,
                        now,
                        now,
                        *claim.args,
                    ),
                )
        found = self.intents_for((a.contract, a.subject, a.action.value) for a in actions)
        mine = [found[(a.contract, a.subject, a.action.value)] for a in actions]
        if self.claims is None:
            return mine
        return [i for i in mine if i.status == "open" and i.claimed_by == self.claims.claimant]

    def set_outcome(
        self,
        intent_ids: Iterable[int],
        outcome: Outcome | None,
        *,
        status: Literal["open", "inflight", "done"],
        detail: str | None = None,
        tx_hash: str | None = None,
        receipt_block: int | None = None,
        receipt_hash: str | None = None,
    ) -> None:
        """Move intents to ``status`` with ``outcome`` (and the receipt that settled them)."""
        ids = list(intent_ids)
        if not ids:
            return
        now = self._clock()
        with self._tx() as c:
            c.executemany(
                "UPDATE keeper_intents SET status = ?, outcome = ?, detail = ?, tx_hash = ?,"
                " receipt_block = ?, receipt_hash = ?, updated_at = ? WHERE id = ?",
                [
                    (status, outcome, detail, tx_hash, receipt_block, receipt_hash, now, i)
                    for i in ids
                ],
            )

    def hook_blocked(self) -> dict[tuple[str, str], int]:
        """Jobs whose hook reverted claimRefund: (contract, subject) -> the decision block.

        Stored as ``reverted_in_simulation`` with a detail starting ``hook_blocked``, so
        no schema change; the planner keeps them off the chain while the hook stays.
        """
        rows = self.conn.execute(
            "SELECT contract, subject, decided_block FROM keeper_intents WHERE chain_id = ?"
            " AND outcome = 'reverted_in_simulation' AND detail LIKE 'hook_blocked%'",
            (self.chain_id,),
        ).fetchall()
        return {(r[0], r[1]): int(r[2]) for r in rows}

    def denied(self) -> set[IntentKey]:
        """Actions that ended ``not_permitted``: the planner must route around them."""
        rows = self.conn.execute(
            "SELECT contract, subject, action FROM keeper_intents"
            " WHERE chain_id = ? AND outcome = 'not_permitted'",
            (self.chain_id,),
        ).fetchall()
        return {(r[0], r[1], r[2]) for r in rows}

    def orphaned_inflight(self) -> list[int]:
        """In-flight intents with no attempt left whose fate is open (signed, sent, mined)."""
        rows = self.conn.execute(
            "SELECT i.id FROM keeper_intents i WHERE i.chain_id = ? AND i.status = 'inflight'"
            " AND NOT EXISTS (SELECT 1 FROM keeper_attempt_intents l JOIN keeper_attempts a"
            " ON a.id = l.attempt_id WHERE l.intent_id = i.id"
            " AND a.status IN ('signed', 'sent', 'mined')) ORDER BY i.id",
            (self.chain_id,),
        ).fetchall()
        return [int(r[0]) for r in rows]

    # ----------------------------------------------------------------- attempts

    def record_attempt(
        self,
        *,
        signer: str,
        nonce: int,
        kind: Literal["call", "batch", "cancel"],
        to_address: str,
        data: bytes,
        max_fee: int,
        tip: int,
        gas_limit: int,
        raw_tx: bytes,
        tx_hash: str,
        intent_ids: Sequence[int],
    ) -> Attempt:
        """Persist a signed transaction BEFORE it is broadcast, with the intents it carries."""
        now = self._clock()
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO keeper_attempts (chain_id, signer, nonce, kind, to_address, data,"
                " max_fee, tip, gas_limit, raw_tx, tx_hash, status, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'signed', ?, ?) RETURNING id",
                (
                    self.chain_id,
                    signer,
                    nonce,
                    kind,
                    to_address,
                    "0x" + data.hex(),
                    str(max_fee),
                    str(tip),
                    gas_limit,
                    "0x" + raw_tx.hex(),
                    tx_hash,
                    now,
                    now,
                ),
            )
            attempt_id = int(cur.fetchone()[0])
            c.executemany(
                "INSERT INTO keeper_attempt_intents (attempt_id, intent_id) VALUES (?, ?)",
                [(attempt_id, i) for i in intent_ids],
            )
            held, who = "", tuple[str, ...]()
            if self.claims is not None:  # the claim fence: still ours, or nothing is recorded
                held, who = f" AND {self.claims.held()}", (self.claims.claimant,)
            cur = c.executemany(
                "UPDATE keeper_intents SET status = 'inflight', outcome = NULL, detail = NULL,"
                f" attempts = attempts + 1, updated_at = ? WHERE id = ?{held}",
                [(now, i, *who) for i in intent_ids],
            )
            if cur.rowcount != len(intent_ids):
                raise ClaimLostError(
                    f"attempt at nonce {nonce} not recorded: the claim on "
                    f"{len(intent_ids) - cur.rowcount} of its intents is no longer ours"
                )
        row = self.conn.execute(
            "SELECT * FROM keeper_attempts WHERE id = ?", (attempt_id,)
        ).fetchone()
        return _attempt(row)

    def mark_attempt(
        self,
        attempt_id: int,
        status: AttemptStatus,
        *,
        sent_block: int | None = None,
        receipt: tuple[int, str, int] | None = None,
    ) -> None:
        """Update an attempt's status; ``receipt`` is (block number, block hash, status)."""
        now = self._clock()
        sets = ["status = ?", "updated_at = ?"]
        args: list[Any] = [status, now]
        if sent_block is not None:
            sets += ["sent_block = ?", "sent_at = COALESCE(sent_at, ?)"]
            args += [sent_block, now]
        if receipt is not None:
            sets += ["receipt_block = ?", "receipt_hash = ?", "receipt_status = ?"]
            args += list(receipt)
        elif status in ("signed", "sent", "dropped", "failed", "replaced"):
            sets += ["receipt_block = NULL", "receipt_hash = NULL", "receipt_status = NULL"]
        self.conn.execute(
            f"UPDATE keeper_attempts SET {', '.join(sets)} WHERE id = ?", (*args, attempt_id)
        )

    def attempt_intent_ids(self, attempt_id: int) -> list[int]:
        rows = self.conn.execute(
            "SELECT intent_id FROM keeper_attempt_intents WHERE attempt_id = ? ORDER BY intent_id",
            (attempt_id,),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def open_nonces(self, signer: str) -> dict[int, list[Attempt]]:
        """Every attempt at every nonce that still has an attempt whose fate is open.

        All attempts of such a nonce are returned (replaced ones too): any of
        them may be the one that was mined.
        """
        rows = self.conn.execute(
            "SELECT * FROM keeper_attempts WHERE chain_id = ? AND signer = ? AND nonce IN ("
            " SELECT nonce FROM keeper_attempts WHERE chain_id = ? AND signer = ?"
            " AND status IN ('signed', 'sent', 'mined')) ORDER BY nonce, id",
            (self.chain_id, signer, self.chain_id, signer),
        ).fetchall()
        out: dict[int, list[Attempt]] = {}
        for row in rows:
            a = _attempt(row)
            out.setdefault(a.nonce, []).append(a)
        return out

    def attempts_at(self, signer: str, nonce: int) -> list[Attempt]:
        """Every attempt ever signed at ``nonce`` (refused ones included), oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM keeper_attempts WHERE chain_id = ? AND signer = ? AND nonce = ?"
            " ORDER BY id",
            (self.chain_id, signer, nonce),
        ).fetchall()
        return [_attempt(r) for r in rows]

    def confirmed_from_nonce(self, signer: str, nonce: int) -> list[Attempt]:
        """Confirmed attempts at ``nonce`` or above (the chain says those are not spent)."""
        rows = self.conn.execute(
            "SELECT * FROM keeper_attempts WHERE chain_id = ? AND signer = ?"
            " AND status = 'confirmed' AND nonce >= ? ORDER BY nonce",
            (self.chain_id, signer, nonce),
        ).fetchall()
        return [_attempt(r) for r in rows]

    def confirmed_since(self, signer: str, block: int) -> list[Attempt]:
        """Confirmed attempts whose receipt block is at or above ``block`` (reorg watch)."""
        rows = self.conn.execute(
            "SELECT * FROM keeper_attempts WHERE chain_id = ? AND signer = ?"
            " AND status = 'confirmed' AND receipt_block >= ? ORDER BY nonce",
            (self.chain_id, signer, block),
        ).fetchall()
        return [_attempt(r) for r in rows]

    def next_nonce_floor(self, signer: str) -> int | None:
        """One past the highest nonce ever signed by ``signer`` (None if never)."""
        row = self.conn.execute(
            "SELECT MAX(nonce) FROM keeper_attempts WHERE chain_id = ? AND signer = ?"
            " AND status != 'failed'",
            (self.chain_id, signer),
        ).fetchone()
        return None if row[0] is None else int(row[0]) + 1

    def used_nonces(self, signer: str, from_nonce: int) -> set[int]:
        """Nonces at or above ``from_nonce`` that carry an attempt that may still land.

        Refused (``failed``) and ``dropped`` attempts do not count: a nonce the
        chain once spent on someone else's transaction is free again after a
        reorg takes that transaction out, and must be filled.
        """
        rows = self.conn.execute(
            "SELECT DISTINCT nonce FROM keeper_attempts WHERE chain_id = ? AND signer = ?"
            " AND nonce >= ? AND status NOT IN ('failed', 'dropped')",
            (self.chain_id, signer, from_nonce),
        ).fetchall()
        return {int(r[0]) for r in rows}
