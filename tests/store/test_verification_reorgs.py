"""The verifier's scan over an index that reorgs: it resumes where it stopped and still
ends with exactly the verifications a fresh pass over the final chain makes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_builders import Synth, SynthBlock, batch_of
from support.postgres import PostgresServer

from keeper.store import index_store
from keeper.store import verifications as store
from keeper.store.db import Db, connect, connect_sqlite
from keeper.store.index_store import IndexStore
from keeper.store.migrations import migrate
from keeper.verify.scan import PendingScan
from keeper.verify.verdict import Verifier
from keeper.verify.verifier import verify_pending

CHAIN = 10
NO_SOURCES = Verifier([])  # every verdict verifies as unavailable: a row per verdict event


def _store(conn: Db | None = None) -> IndexStore:
    conn = conn if conn is not None else connect_sqlite(":memory:")
    migrate(conn)
    return IndexStore(conn, CHAIN, keep_margin=64)


def _drain(conn: Db, scan: PendingScan, limit: int) -> int:
    """What the daemon's verify loop does until it has nothing left (retries never due)."""
    runs = 0
    while n := asyncio.run(verify_pending(conn, scan, NO_SOURCES, now=0, limit=limit)):
        runs += n
    return runs


def _verified(conn: Db) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT contract, job_id, event_name, block_number, block_hash, log_index "
        "FROM verifications WHERE chain_id = ? ORDER BY 1, 2",
        (CHAIN,),
    ).fetchall()
    return [tuple(r) for r in rows]


def _unowned_history(conn: Db) -> int:
    row = conn.execute(
        "SELECT count(*) FROM verification_reports r WHERE NOT EXISTS (SELECT 1 FROM "
        "verifications v WHERE v.chain_id = r.chain_id AND v.contract = r.contract "
        "AND v.job_id = r.job_id)"
    ).fetchone()
    return int(row[0])


def _replay_with_verifier(
    store_: IndexStore, chunk: int, limit: int, reorgs: list[tuple[int, int]], seed: int
) -> list[SynthBlock]:
    """Batches and reorgs, the verifier running between every two steps; the final chain."""
    conn = store_.conn
    scan = PendingScan(CHAIN)
    synth = Synth(seed=seed, events_per_block=6)
    chain: list[SynthBlock] = synth.blocks(1, 12)
    for i in range(0, len(chain), chunk):
        store_.apply_batch(batch_of(chain[i : i + chunk], finalized=0))
        _drain(conn, scan, limit)
    for n, (depth, grow) in enumerate(reorgs):
        fork = len(chain) - depth
        store_.rollback_to(fork)
        _drain(conn, scan, limit)
        synth.switch_fork(f"fork{n}")
        branch = synth.blocks(fork + 1, fork + depth + grow, parent=chain[fork - 1].header.hash)
        chain = chain[:fork] + branch
        for i in range(0, len(branch), chunk):
            store_.apply_batch(batch_of(branch[i : i + chunk], finalized=0))
            if i % 2 == 0:  # sometimes a rollback and its new branch before the next pass
                _drain(conn, scan, limit)
    _drain(conn, scan, limit)
    return chain


def _verified_chain(
    seed: int, last: int, store_: IndexStore | None = None
) -> tuple[IndexStore, Synth, list[SynthBlock], PendingScan]:
    """Blocks 1..``last`` indexed in one batch and verified by a scan kept for the test."""
    store_ = store_ if store_ is not None else _store()
    synth = Synth(seed=seed, events_per_block=6)
    chain = synth.blocks(1, last)
    store_.apply_batch(batch_of(chain, finalized=0))
    scan = PendingScan(CHAIN)
    _drain(store_.conn, scan, limit=50)
    return store_, synth, chain, scan


def _fresh_pass(chain: list[SynthBlock]) -> list[tuple[Any, ...]]:
    fresh = _store()
    fresh.apply_batch(batch_of(chain, finalized=0))
    _drain(fresh.conn, PendingScan(CHAIN), limit=1_000)
    return _verified(fresh.conn)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunk=st.integers(1, 6),
    limit=st.integers(1, 7),
    reorgs=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 6)), min_size=1, max_size=3),
    seed=st.integers(0, 1000),
)
def test_a_resumed_scan_over_reorgs_ends_as_a_fresh_pass(
    chunk: int, limit: int, reorgs: list[tuple[int, int]], seed: int
) -> None:
    """What one pass over the final chain verifies, and nothing the chain no longer has."""
    store_ = _store()
    chain = _replay_with_verifier(store_, chunk, limit, reorgs, seed)
    _assert_as_fresh(store_.conn, chain)


def _assert_as_fresh(conn: Db, chain: list[SynthBlock]) -> None:
    """Each verification a fresh pass makes, and beyond them only what a fresh pass cannot see.

    A task reopened after its evaluation has no evidence hash any more, so a
    fresh pass skips its ``TaskEvaluated``; one verified before the reopening
    keeps its verification (the evaluation did happen). Every verification's
    event is on the chain, and no report history is left without its verification.
    """
    verified, fresh = _verified(conn), _fresh_pass(chain)
    assert set(fresh) <= set(verified)
    for contract, subject, name, *_ in set(verified) - set(fresh):
        assert name == "TaskEvaluated"
        row = conn.execute(
            "SELECT evidence_hash FROM tasks WHERE chain_id = ? AND contract = ? AND task_id = ?",
            (CHAIN, contract, subject),
        ).fetchone()
        assert row[0] is None
    events = {(b.header.number, b.header.hash, e.log.log_index) for b in chain for e in b.events}
    assert all((r[3], r[4], r[5]) in events for r in verified)
    assert _unowned_history(conn) == 0


def test_the_scan_reads_on_from_its_position() -> None:
    """A pass that reads to the end starts the next after the last event it saw."""
    store_ = _store()
    synth = Synth(seed=3, events_per_block=6)
    store_.apply_batch(batch_of(synth.blocks(1, 20), finalized=0))
    scan = PendingScan(CHAIN)
    assert scan.scanned_block() is None
    assert _drain(store_.conn, scan, limit=4) > 4
    end = store.last_event(store_.conn, CHAIN)
    assert end is not None and end[0] == 20
    assert scan.jobs_after == end and scan.tasks_after == end and scan.scanned_block() == 20
    store_.apply_batch(batch_of(synth.blocks(21, 22), finalized=0))
    new, _ = scan.pending(store_.conn, 1_000)
    assert new and all(v.block_number > 20 for v in new)
    assert store.pending_verdicts(store_.conn, CHAIN, 1_000) == new  # the same from the start


@pytest.mark.parametrize(
    ("jobs_after", "tasks_after", "scanned"),
    [
        ((12, "0x" + "aa" * 32, 3), None, None),
        (None, (12, "0x" + "aa" * 32, 3), None),
        ((12, "0x" + "aa" * 32, 3), (7, "0x" + "bb" * 32, 0), 7),
        ((7, "0x" + "bb" * 32, 0), (12, "0x" + "aa" * 32, 3), 7),
    ],
)
def test_the_scanned_block_is_the_one_both_scans_passed(
    jobs_after: store.EventPosition | None,
    tasks_after: store.EventPosition | None,
    scanned: int | None,
) -> None:
    """The daemon reports how far verification has looked: as far as the slower of the two
    scans, and nowhere while either has not passed an event."""
    scan = PendingScan(CHAIN, jobs_after=jobs_after, tasks_after=tasks_after)
    assert scan.scanned_block() == scanned


def test_a_rollback_drops_only_the_verifications_it_orphaned() -> None:
    """Rolled back to block 8: the verdicts after it lose their verifications, those before keep."""
    store_, _, _, scan = _verified_chain(seed=5, last=12)
    before = _verified(store_.conn)
    assert any(r[3] > 8 for r in before) and any(r[3] <= 8 for r in before)
    store_.rollback_to(8)
    assert scan.sync(store_.conn) == len({(r[0], r[1]) for r in before if r[3] > 8})
    assert scan.scanned_block() == 9  # back to the first block after the fork point
    assert _verified(store_.conn) == [r for r in before if r[3] <= 8]
    assert _unowned_history(store_.conn) == 0
    assert scan.sync(store_.conn) == 0  # the same rollback is taken in once


def test_a_rollback_recorded_by_another_connection_is_seen(tmp_path: Any) -> None:
    """A standby's verifier learns of the indexing daemon's rollback through the database."""
    indexer = _store(connect(tmp_path / "k.db"))
    verifier_conn = connect(tmp_path / "k.db")
    _, synth, chain, _ = _verified_chain(seed=7, last=10, store_=indexer)
    scan = PendingScan(CHAIN)  # the standby's, from its start
    _drain(verifier_conn, scan, limit=50)
    indexer.rollback_to(5)
    synth.switch_fork("b")
    branch = synth.blocks(6, 10, parent=chain[4].header.hash)
    indexer.apply_batch(batch_of(branch, finalized=0))
    _drain(verifier_conn, scan, limit=50)
    _assert_as_fresh(verifier_conn, chain[:5] + branch)


def test_rollback_records_are_kept_to_a_bound_and_a_gap_means_a_full_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The newest records stay; a scan that missed pruned ones checks every verification."""
    monkeypatch.setattr(index_store, "ROLLBACKS_KEPT", 2)
    store_, _, _, scan = _verified_chain(seed=9, last=12)
    seen = scan.rollback_seq
    store_.conn.execute(  # an orphan no rollback record covers: only a full check finds it
        "UPDATE verifications SET block_hash = '0xgone' WHERE block_number = "
        "(SELECT min(block_number) FROM verifications)"
    )
    for n in range(4):
        store_.rollback_to(12 - n - 1)
    seqs = [r[0] for r in store_.conn.execute("SELECT seq FROM rollbacks ORDER BY seq")]
    assert seqs == [3, 4] and seen == 0
    lowest = min(r[3] for r in _verified(store_.conn))
    scan.sync(store_.conn)
    assert scan.rollback_seq == 4 and scan.jobs_after is None
    assert all(r[3] > lowest for r in _verified(store_.conn))


def test_the_scan_on_postgresql(postgres_server: PostgresServer) -> None:
    """Row-value positions and the orphan check as PostgreSQL runs them: same as a fresh pass."""
    conn = connect(postgres_server.database())
    pg = _store(conn)
    for table in ("events", "blocks", "cursor", "chain_reads", "jobs", "tasks",
                  "verifications", "verification_reports", "rollbacks"):  # fmt: skip
        conn.execute(f"DELETE FROM {table}")
    chain = _replay_with_verifier(pg, chunk=3, limit=2, reorgs=[(4, 2), (2, 3)], seed=11)
    _assert_as_fresh(conn, chain)
