"""Claims on intents: two keepers (two signers) on one database of each backend, two connections."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from keeper.domain.model import Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.store.claims import ClaimLostError, Claims
from keeper.store.db import connect
from keeper.store.intents import IntentStore
from keeper.store.migrations import migrate

C = "0x" + "12" * 20
A = "0x" + "aa" * 20
B = "0x" + "bb" * 20
CHAIN = 31337


@pytest.fixture
def shared(new_db: Callable[[], str]) -> str:
    """One database, on each backend, that the test's connections share."""
    return new_db()


def act(subject: str) -> Action:
    return Action(C, subject, ActionKind.CLAIM_REFUND, 1000, Protocol.ERC8183)


def keeper(shared: str, signer: str, seconds: float) -> IntentStore:
    conn = connect(shared)
    migrate(conn)
    return IntentStore(conn, CHAIN, claims=Claims(conn, CHAIN, signer, seconds))


def send(store: IntentStore, signer: str, nonce: int, ids: list[int]) -> int:
    return store.record_attempt(
        signer=signer, nonce=nonce, kind="call", to_address=C, data=b"\x01", max_fee=10,
        tip=1, gas_limit=50_000, raw_tx=bytes([nonce, 2]), tx_hash="0x" + f"{nonce:064x}",
        intent_ids=ids,
    ).id  # fmt: skip


def count(store: IntentStore, sql: str) -> int:
    return int(store.conn.execute(sql).fetchone()[0])


class TestDecisions:
    def test_one_keeper_gets_each_intent_until_its_claim_expires(self, shared: str) -> None:
        a, b = keeper(shared, A, 0.3), keeper(shared, B, 0.3)
        [mine] = a.open_decisions([act("1"), act("2")], 10, "0x01")[:1]
        assert mine.claimed_by == A
        # b decides the same two actions a block later: a holds both, b gets none
        assert b.open_decisions([act("1"), act("2")], 11, "0x02") == []
        row = a.intents_for([mine.key])[mine.key]
        assert (row.decided_block, row.claimed_by) == (10, A)  # untouched by b's try
        assert [i.subject for i in b.open_intents()] == []
        time.sleep(0.4)  # a stopped renewing: b may take the open ones over
        assert [i.subject for i in b.open_intents()] == ["1", "2"]
        taken = b.open_decisions([act("1")], 12, "0x03")
        assert [(i.subject, i.claimed_by, i.decided_block) for i in taken] == [("1", B, 12)]

    def test_renewal_keeps_a_claim_alive(self, shared: str) -> None:
        a, b = keeper(shared, A, 0.3), keeper(shared, B, 0.3)
        a.open_decisions([act("1")], 10, "0x01")
        for _ in range(4):
            time.sleep(0.1)
            assert a.claims is not None and a.claims.renew() == 1
        assert b.open_decisions([act("1")], 11, "0x02") == []

    def test_in_flight_and_confirmed_intents_are_never_reopened_by_another(
        self, shared: str
    ) -> None:
        a, b = keeper(shared, A, 0.1), keeper(shared, B, 0.1)
        one, two = a.open_decisions([act("1"), act("2")], 10, "0x01")
        send(a, A, 0, [one.id])
        a.set_outcome([two.id], "confirmed", status="done", tx_hash="0x" + "cd" * 32)
        time.sleep(0.2)  # a's claims ran out
        assert b.open_decisions([act("1"), act("2")], 11, "0x02") == []
        rows = a.intents_for([one.key, two.key])
        assert (rows[one.key].status, rows[two.key].outcome) == ("inflight", "confirmed")

    def test_an_intent_another_keeper_ended_may_be_decided_again_at_once(self, shared: str) -> None:
        a, b = keeper(shared, A, 30.0), keeper(shared, B, 30.0)
        [mine] = a.open_decisions([act("1")], 10, "0x01")
        a.set_outcome([mine.id], "preempted", status="done", detail="InvalidStatus()")
        [again] = b.open_decisions([act("1")], 20, "0x02")
        assert (again.id, again.claimed_by, again.status) == (mine.id, B, "open")


class TestRecordFence:
    def test_a_stalled_keeper_records_no_attempt_once_another_took_over(self, shared: str) -> None:
        a, b = keeper(shared, A, 0.2), keeper(shared, B, 30.0)
        [mine] = a.open_decisions([act("1")], 10, "0x01")
        time.sleep(0.3)  # a stalls between its simulation and its signature
        [theirs] = b.open_decisions([act("1")], 11, "0x02")
        assert theirs.id == mine.id
        with pytest.raises(ClaimLostError):
            send(a, A, 0, [mine.id])
        assert count(a, "SELECT COUNT(*) FROM keeper_attempts") == 0
        assert count(a, "SELECT COUNT(*) FROM keeper_attempt_intents") == 0
        send(b, B, 0, [theirs.id])
        assert count(a, "SELECT COUNT(*) FROM keeper_attempts WHERE signer = '" + B + "'") == 1

    def test_an_expired_claim_nobody_took_still_refuses(self, shared: str) -> None:
        a = keeper(shared, A, 0.1)
        [mine] = a.open_decisions([act("1")], 10, "0x01")
        time.sleep(0.2)
        with pytest.raises(ClaimLostError):
            send(a, A, 0, [mine.id])


class TestAdoption:
    def test_a_dead_keepers_in_flight_intents_go_to_exactly_one_taker(self, shared: str) -> None:
        a, b = keeper(shared, A, 0.1), keeper(shared, B, 30.0)
        c = IntentStore(b.conn, CHAIN, claims=Claims(b.conn, CHAIN, "0x" + "cc" * 20, 30.0))
        one, two = a.open_decisions([act("1"), act("2")], 10, "0x01")
        send(a, A, 0, [one.id, two.id])
        assert b.claims is not None and c.claims is not None
        assert b.claims.foreign_signers() == []  # a's claim is live
        time.sleep(0.2)
        assert b.claims.foreign_signers() == [A]
        assert b.claims.adopt(A) == [one.id, two.id]
        assert b.claims.foreign_signers() == [A]  # b settles it on every tick until it ends
        assert c.claims.foreign_signers() == []
        assert c.claims.adopt(A) == []
        # the attempt stays a's: b settles it, it does not sign a new one
        assert count(b, "SELECT COUNT(*) FROM keeper_attempts") == 1
        assert set(b.open_nonces(A)) == {0}
