"""The keeper's tables: unique intents, attempts written with their links, nonce bookkeeping."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import psycopg
import pytest
from support import keeper_books

from keeper.domain.model import Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.store.db import connect, dialect
from keeper.store.intents import IntentStore
from keeper.store.migrations import migrate

C = "0x" + "12" * 20
SIGNER = "0x" + "34" * 20


def act(subject: str, kind: ActionKind = ActionKind.CLAIM_REFUND) -> Action:
    return Action(C, subject, kind, 1000, Protocol.ERC8183)


@pytest.fixture
def store(new_db: Callable[[], str]) -> IntentStore:
    conn = connect(new_db())
    migrate(conn)
    return IntentStore(conn, chain_id=31337, clock=lambda: 1.0)


def attempt(store: IntentStore, nonce: int, ids: list[int], tag: str) -> int:
    return store.record_attempt(
        signer=SIGNER,
        nonce=nonce,
        kind="call",
        to_address=C,
        data=b"\x01",
        max_fee=2**200,
        tip=5,
        gas_limit=50_000,
        raw_tx=b"\x02" + tag.encode(),
        tx_hash="0x" + tag * (64 // len(tag)),
        intent_ids=ids,
    ).id


class TestIntents:
    """One row per (chain, contract, subject, action); re-deciding reuses it."""

    def test_reopen_keeps_identity(self, store: IntentStore) -> None:
        """Deciding the same action again re-opens the row with the new block, same id."""
        [first] = store.open_decisions([act("1")], 10, "0xaa")
        store.set_outcome([first.id], "preempted", status="done", detail="InvalidStatus()")
        [again] = store.open_decisions([act("1")], 20, "0xbb")
        assert again.id == first.id
        assert (again.status, again.outcome, again.decided_block) == ("open", None, 20)
        assert len(keeper_books.all_intents(store)) == 1

    def test_database_refuses_a_duplicate_key(self, store: IntentStore) -> None:
        """The UNIQUE key holds even for a raw insert that bypasses the store."""
        store.open_decisions([act("1")], 10, "0xaa")
        with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
            store.conn.execute(
                "INSERT INTO keeper_intents (chain_id, contract, subject, action, protocol, status,"
                " due_at, decided_block, decided_hash, created_at, updated_at)"
                " VALUES (31337, ?, '1', 'claimRefund', 'erc8183', 'open', 1, 1, '0x', 1, 1)",
                (C,),
            )

    def test_denied_lists_not_permitted_only(self, store: IntentStore) -> None:
        """Only not_permitted intents are handed to the planner as denied."""
        a, b = store.open_decisions(
            [act("0x" + "01" * 32, ActionKind.EVALUATOR_TIMEOUT), act("2")], 10, "0xaa"
        )
        store.set_outcome([a.id], "not_permitted", status="done")
        store.set_outcome([b.id], "preempted", status="done")
        assert store.denied() == {(C, "0x" + "01" * 32, "evaluatorTimeout")}
        assert keeper_books.outcome_counts(store) == {"not_permitted": 1, "preempted": 1}


class TestAttempts:
    """Attempts are persisted signed, with their intents, before any broadcast."""

    def test_record_links_and_marks_inflight(self, store: IntentStore) -> None:
        """Recording an attempt moves its intents in flight and counts the attempt."""
        intents = store.open_decisions([act("1"), act("2")], 10, "0xaa")
        aid = attempt(store, 0, [i.id for i in intents], "a1")
        assert store.attempt_intent_ids(aid) == [i.id for i in intents]
        assert {(i.status, i.attempts) for i in keeper_books.all_intents(store)} == {
            ("inflight", 1)
        }
        [row] = keeper_books.all_attempts(store)
        assert (row.status, row.max_fee, row.raw_tx) == ("signed", 2**200, b"\x02a1")
        typeof = (
            "typeof(max_fee)" if dialect(store.conn) == "sqlite" else "pg_typeof(max_fee)::text"
        )
        stored = store.conn.execute(f"SELECT {typeof}, max_fee FROM keeper_attempts").fetchone()
        assert tuple(stored) == ("text", str(2**200))

    def test_open_nonces_include_every_attempt_of_the_nonce(self, store: IntentStore) -> None:
        """A nonce with a live attempt comes with its replaced ones; settled nonces stay out."""
        [i] = store.open_decisions([act("1")], 10, "0xaa")
        old = attempt(store, 0, [i.id], "a1")
        store.mark_attempt(old, "replaced")
        attempt(store, 0, [i.id], "b2")
        done = attempt(store, 1, [i.id], "c3")
        store.mark_attempt(done, "confirmed", receipt=(5, "0xff", 1))
        nonces = store.open_nonces(SIGNER)
        assert list(nonces) == [0]
        assert [a.status for a in nonces[0]] == ["replaced", "signed"]
        assert store.confirmed_since(SIGNER, 5)[0].receipt_hash == "0xff"
        assert store.confirmed_since(SIGNER, 6) == []

    def test_attempts_at_lists_refused_ones_too(self, store: IntentStore) -> None:
        """Every fee ever signed at a nonce stays visible, so a re-bump starts above all of them."""
        [i] = store.open_decisions([act("1")], 10, "0xaa")
        first = attempt(store, 2, [i.id], "a1")
        store.mark_attempt(first, "failed")
        attempt(store, 2, [i.id], "b2")
        attempt(store, 3, [i.id], "c3")
        assert [a.tx_hash[:4] for a in store.attempts_at(SIGNER, 2)] == ["0xa1", "0xb2"]

    def test_nonce_floor_ignores_refused_attempts(self, store: IntentStore) -> None:
        """Refused nonces do not move the floor; refused and dropped ones are not 'used'."""
        assert store.next_nonce_floor(SIGNER) is None
        [i] = store.open_decisions([act("1")], 10, "0xaa")
        attempt(store, 3, [i.id], "a1")
        refused = attempt(store, 4, [i.id], "b2")
        store.mark_attempt(refused, "failed")
        assert store.next_nonce_floor(SIGNER) == 4
        assert store.used_nonces(SIGNER, 0) == {3}
        dropped = attempt(store, 2, [i.id], "c3")
        store.mark_attempt(dropped, "dropped")  # a reorg may free its nonce again
        assert store.used_nonces(SIGNER, 0) == {3}

    def test_orphans_are_inflight_intents_without_live_attempts(self, store: IntentStore) -> None:
        """An intent whose only attempt failed is an orphan; one with a live attempt is not."""
        a, b = store.open_decisions([act("1"), act("2")], 10, "0xaa")
        failed = attempt(store, 0, [a.id], "a1")
        attempt(store, 1, [b.id], "b2")
        store.mark_attempt(failed, "failed")
        assert store.orphaned_inflight() == [a.id]
