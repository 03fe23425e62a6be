"""Claims on intents: which keeper (by signer address) may act on each, until when.

Several keepers on one database each have their own signer. An intent is
acted on only by the keeper whose claim on it is live by the DATABASE clock
(``claimed_by``, ``claim_expires`` on ``keeper_intents``); the unique intent
key still makes the row itself the one place a decision lives. A claim is
taken in the same transaction that opens the decision
(:meth:`keeper.store.intents.IntentStore.open_decisions`), checked again in
the transaction that records a signed attempt (a keeper that stalled past
its claim records and sends nothing), renewed every tick while the intent is
open or in flight, and taken over once it has expired: an open intent by
deciding it again, an in-flight one by :meth:`Claims.adopt`, after which the
taker settles the stored attempt (looks up its receipt, rebroadcasts its
stored bytes) and never signs a second transaction for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from keeper.errors import KeeperError
from keeper.store.db import Db, dialect, write_transaction
from keeper.store.leases import DB_NOW

__all__ = ["DEFAULT_CLAIM_SECONDS", "ClaimLostError", "Claims", "UpsertClaim"]

# Long enough that a tick (simulate, estimate, sign, send) never outlasts it; a
# dead keeper's intents wait this long for another keeper.
DEFAULT_CLAIM_SECONDS: Final = 60.0

_LIVE_ATTEMPT = "a.status IN ('signed', 'sent', 'mined')"


class ClaimLostError(KeeperError):
    """An attempt was not recorded: its intents' claim is no longer this keeper's."""


@dataclass(frozen=True, slots=True)
class UpsertClaim:
    """The parts a decision's upsert gains to take a claim (all empty: no claims kept)."""

    cols: str = ""
    values: str = ""
    sets: str = ""
    where: str = ""
    args: tuple[Any, ...] = ()


class Claims:
    """One keeper's claims on one chain's intents; callers own the connection."""

    def __init__(
        self,
        conn: Db,
        chain_id: int,
        claimant: str,
        seconds: float = DEFAULT_CLAIM_SECONDS,
    ) -> None:
        self.conn = conn
        self.chain_id = chain_id
        self.claimant = claimant.lower()
        self.seconds = seconds
        self.now = DB_NOW[dialect(conn)]

    def takeable(self, table: str = "keeper_intents") -> str:
        """SQL true when this keeper may take the row's claim (one ``?``: the claimant)."""
        return (
            f"({table}.claimed_by IS NULL OR {table}.claimed_by = ? "
            f"OR {table}.claim_expires < {self.now})"
        )

    def held(self) -> str:
        """SQL true while this keeper holds the row's claim (one ``?``: the claimant)."""
        return f"(claimed_by = ? AND claim_expires > {self.now})"

    def expiry(self) -> str:
        """SQL for a new claim's expiry (one ``?``: the claim's seconds)."""
        return f"({self.now} + ?)"

    def upsert(self) -> UpsertClaim:
        """Take the claim with the decision; leave alone what is in flight or confirmed,
        and an open intent another keeper holds a live claim on (one that ended
        otherwise, preempted or refused, anyone may decide again)."""
        return UpsertClaim(
            cols=", claimed_by, claim_expires",
            values=f", ?, {self.expiry()}",
            sets=", claimed_by = excluded.claimed_by, claim_expires = excluded.claim_expires",
            where=(
                " WHERE keeper_intents.status != 'inflight' AND coalesce(keeper_intents.outcome,"
                f" '') != 'confirmed' AND (keeper_intents.status = 'done' OR {self.takeable()})"
            ),
            args=(self.claimant, self.seconds, self.claimant),
        )

    def renew(self) -> int:
        """Extend every claim this keeper holds on an open or in-flight intent."""
        cur = self.conn.execute(
            f"UPDATE keeper_intents SET claim_expires = {self.expiry()} WHERE chain_id = ? "
            "AND claimed_by = ? AND status IN ('open', 'inflight')",
            (self.seconds, self.chain_id, self.claimant),
        )
        return cur.rowcount

    def foreign_signers(self) -> list[str]:
        """Other signers whose live attempts carry in-flight intents that are ours to settle:
        claimed by nobody alive (expired, or never claimed), or adopted by us before."""
        rows = self.conn.execute(
            "SELECT DISTINCT a.signer FROM keeper_intents i JOIN keeper_attempt_intents l "
            "ON l.intent_id = i.id JOIN keeper_attempts a ON a.id = l.attempt_id "
            f"WHERE i.chain_id = ? AND i.status = 'inflight' AND {_LIVE_ATTEMPT} "
            f"AND lower(a.signer) != ? AND {self.takeable('i')} ORDER BY a.signer",
            (self.chain_id, self.claimant, self.claimant),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def adopt(self, signer: str) -> list[int]:
        """Take the expired claims on ``signer``'s in-flight intents; the ids taken.

        One transaction: of several keepers adopting at once, one gets each
        intent. The taker then settles that signer's attempts from the chain.
        """
        with write_transaction(self.conn):
            rows = self.conn.execute(
                f"UPDATE keeper_intents SET claimed_by = ?, claim_expires = {self.expiry()} "
                "WHERE chain_id = ? AND status = 'inflight' "
                f"AND (claimed_by IS NULL OR claim_expires < {self.now}) AND id IN ("
                " SELECT l.intent_id FROM keeper_attempt_intents l JOIN keeper_attempts a"
                f" ON a.id = l.attempt_id WHERE a.signer = ? AND {_LIVE_ATTEMPT}) RETURNING id",
                (self.claimant, self.seconds, self.chain_id, signer),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)
