"""The lease rows in one database of each backend, two connections, and the index fence."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from index_builders import Synth, batch_of

from keeper.store.db import connect
from keeper.store.index_store import IndexStore
from keeper.store.leases import DB_NOW, STATEMENTS, LeaseFence, LeaseLostError, LeaseStore
from keeper.store.migrations import migrate

CHAIN = 31337


@pytest.fixture
def shared(new_db: Callable[[], str]) -> str:
    """One database, on each backend, that the test's connections share."""
    return new_db()


def _pair(shared: str) -> tuple[LeaseStore, LeaseStore]:
    a = connect(shared)
    migrate(a)
    b = connect(shared)
    return LeaseStore(a, "indexer", CHAIN), LeaseStore(b, "indexer", CHAIN)


class TestAcquire:
    def test_first_holder_gets_epoch_one_and_renewals_keep_it(self, shared: str) -> None:
        a, _ = _pair(shared)
        first = a.try_acquire("a:1", "a", 5.0, startup=True)
        assert first.before is None
        assert first.after is not None and (first.after.holder, first.after.epoch) == ("a:1", 1)
        assert first.after.expires_at == pytest.approx(first.now + 5.0, abs=0.05)
        again = a.try_acquire("a:1", "a", 5.0, startup=False)
        assert again.after is not None and again.after.epoch == 1
        assert again.after.expires_at >= first.after.expires_at

    def test_a_live_lease_is_not_taken_and_an_expired_one_is_with_a_new_epoch(
        self, shared: str
    ) -> None:
        a, b = _pair(shared)
        a.try_acquire("a:1", "a", 0.3, startup=True)
        refused = b.try_acquire("b:1", "b", 0.3, startup=True)
        assert refused.after is not None and refused.after.holder == "a:1"
        time.sleep(0.4)
        taken = b.try_acquire("b:1", "b", 0.3, startup=False)
        assert taken.after is not None and (taken.after.holder, taken.after.epoch) == ("b:1", 2)
        assert taken.before is not None and taken.before.holder == "a:1"
        # the old holder's renewal changes nothing now
        late = a.try_acquire("a:1", "a", 0.3, startup=False)
        assert late.after is not None and (late.after.holder, late.after.epoch) == ("b:1", 2)

    def test_a_restart_of_the_same_node_takes_its_lease_back_at_once(self, shared: str) -> None:
        a, b = _pair(shared)
        a.try_acquire("a:1", "a", 30.0, startup=True)
        # not at start-up (a one-shot command on the same host): refused
        assert b.try_acquire("a:2", "a", 30.0, startup=False).after.holder == "a:1"  # type: ignore[union-attr]
        back = b.try_acquire("a:2", "a", 30.0, startup=True)
        assert back.after is not None and (back.after.holder, back.after.epoch) == ("a:2", 2)
        # another node may not do that
        assert a.try_acquire("c:1", "c", 30.0, startup=True).after.holder == "a:2"  # type: ignore[union-attr]

    def test_release_hands_over_without_waiting(self, shared: str) -> None:
        a, b = _pair(shared)
        a.try_acquire("a:1", "a", 30.0, startup=True)
        a.release("a:1", 1)
        taken = b.try_acquire("b:1", "b", 30.0, startup=False)
        assert taken.after is not None and taken.after.holder == "b:1"

    def test_both_dialects_have_every_statement(self) -> None:
        assert STATEMENTS["sqlite"].keys() == STATEMENTS["postgresql"].keys()
        for name, text in STATEMENTS["postgresql"].items():
            # the same statement apart from the clock (placeholders are translated)
            assert text.replace(DB_NOW["postgresql"], "NOW") == STATEMENTS["sqlite"][name].replace(
                DB_NOW["sqlite"], "NOW"
            ), name
            assert "julianday" not in text, name


class TestFence:
    def _index(self, shared: str) -> tuple[IndexStore, IndexStore, LeaseStore, LeaseStore]:
        la, lb = _pair(shared)
        return IndexStore(la.conn, CHAIN), IndexStore(lb.conn, CHAIN), la, lb

    def test_a_stale_epochs_batch_and_rollback_change_nothing(self, shared: str) -> None:
        old, new, la, lb = self._index(shared)
        blocks = Synth(seed=3).blocks(1, 20)
        fence_a = LeaseFence(la, "a:1")
        old.fence = fence_a
        fence_a.epoch = la.try_acquire("a:1", "a", 0.2, startup=True).after.epoch  # type: ignore[union-attr]
        old.apply_batch(batch_of(blocks[:10], finalized=5))
        time.sleep(0.3)  # a stalled leader: its lease runs out, a standby takes over
        fence_b = LeaseFence(lb, "b:1")
        new.fence = fence_b
        fence_b.epoch = lb.try_acquire("b:1", "b", 30.0, startup=False).after.epoch  # type: ignore[union-attr]
        assert fence_b.epoch == 2
        new.apply_batch(batch_of(blocks[10:15], finalized=10))
        before = new.dump()
        # the old leader wakes up with its late batch and a reorg it decided on
        with pytest.raises(LeaseLostError):
            old.apply_batch(batch_of(blocks[15:], finalized=12))
        with pytest.raises(LeaseLostError):
            old.rollback_to(3)
        assert fence_a.refused == 2
        assert new.dump() == before
        assert new.cursor().indexed_block == 15  # type: ignore[union-attr]
        assert not old.conn.in_transaction

    def test_an_expired_lease_fences_even_when_nobody_took_it(self, shared: str) -> None:
        store, _, la, _ = self._index(shared)
        fence = LeaseFence(la, "a:1")
        store.fence = fence
        fence.epoch = la.try_acquire("a:1", "a", 0.1, startup=True).after.epoch  # type: ignore[union-attr]
        time.sleep(0.2)
        with pytest.raises(LeaseLostError):
            store.apply_batch(batch_of(Synth(seed=4).blocks(1, 3), finalized=1))
        assert store.cursor() is None

    def test_a_process_that_is_not_leading_writes_nothing(self, shared: str) -> None:
        store, _, la, _ = self._index(shared)
        store.fence = LeaseFence(la, "a:1")  # epoch None: never granted
        with pytest.raises(LeaseLostError):
            store.apply_batch(batch_of(Synth(seed=4).blocks(1, 3), finalized=1))
        assert store.cursor() is None
