"""IndexStore: atomic idempotent batches, rollback, rebuild, window pruning."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from index_builders import (
    JOBS,
    LEGACY_JOBS,
    TASKS,
    TOKEN,
    Synth,
    SynthBlock,
    batch_of,
    block_hash,
)

from keeper.domain.model import BlockHeader, ChainRead, TaskStatus
from keeper.domain.reads import FINALIZE_SILENT, RESOLVE_SILENT
from keeper.domain.reducers import reduce_job, reduce_task
from keeper.errors import DeepReorgError, StateCorruptedError
from keeper.store.db import connect
from keeper.store.index_rows import decoded_args_json, description_from_json, row_writes
from keeper.store.index_store import (
    Batch,
    IndexStore,
    StampChecks,
    decode_result,
    encode_args,
)
from keeper.store.migrations import migrate
from keeper.store.states import disputed_tasks, task_from_row
from keeper.store.subjects import detail

CHAIN = 31337


def _store(new_db: Callable[[], str], cache: int = 50_000) -> IndexStore:
    conn = connect(new_db())
    migrate(conn)
    return IndexStore(conn, CHAIN, keep_margin=4, decoded_cache=cache)


def _apply_in_chunks(store: IndexStore, blocks: list[SynthBlock], size: int, lag: int) -> None:
    for i in range(0, len(blocks), size):
        chunk = blocks[i : i + size]
        store.apply_batch(batch_of(chunk, finalized=max(chunk[-1].header.number - lag, 0)))


class TestApply:
    def test_projections_equal_direct_reduction(self, new_db: Callable[[], str]) -> None:
        """Stored job and task rows equal what the reducers give on the same events and reads."""
        store = _store(new_db)
        blocks = Synth(seed=5).blocks(1, 30)
        result = store.apply_batch(batch_of(blocks, finalized=20))
        events = [e for b in blocks for e in b.events]
        reads = [r for b in blocks for r in b.reads]
        assert result.new_events == len(events)
        assert result.unknown_events == sum(1 for e in events if e.name is None) > 0
        jobs = {(r["contract"], r["job_id"]): r for r in store.conn.execute("SELECT * FROM jobs")}
        tasks = {
            (r["contract"], r["task_id"]): r for r in store.conn.execute("SELECT * FROM tasks")
        }
        subjects = {(e.contract, e.subject) for e in events if e.subject is not None}
        assert result.touched == subjects
        assert set(jobs) | set(tasks) == subjects
        for (contract, subject), row in jobs.items():
            want = reduce_job(contract, subject, events, reads)
            assert (row["status"], row["status_code"]) == (want.status.label, int(want.status))
            assert (row["budget"], row["token"]) == (str(want.budget), want.token)
            description = description_from_json(row["description"])
            assert (description, row["legacy"]) == (want.description, int(want.legacy))
        for (contract, subject), row in tasks.items():
            task = reduce_task(contract, subject, events, reads)
            assert (row["status"], row["evaluation_deadline"]) == (
                task.status.label,
                task.evaluation_deadline,
            )
        legacy_tokens = {
            r["token"] for r in jobs.values() if r["contract"] == LEGACY_JOBS and r["budget"] != "0"
        }
        assert legacy_tokens == {TOKEN}

    def test_uint256_amounts_survive_and_times_saturate(self, new_db: Callable[[], str]) -> None:
        """A 2**256-1 budget is stored exactly as text; a huge expiry saturates to int64."""
        store = _store(new_db)
        blocks = Synth(seed=5).blocks(1, 40)
        store.apply_batch(batch_of(blocks, finalized=0))
        budgets = {r[0] for r in store.conn.execute("SELECT budget FROM jobs")}
        assert str(2**256 - 1) in budgets
        args = store.conn.execute(
            "SELECT args_json FROM events WHERE name = 'BudgetSet' AND args_json LIKE ?",
            (f"%{2**256 - 1}%",),
        ).fetchone()
        assert args is not None
        created = next(e for b in blocks for e in b.events if e.name == "JobCreated")
        huge = replace(
            created,
            args={**created.args, "expiredAt": 2**256 - 1},
            log=replace(created.log, log_index=999),
        )
        store.apply_batch(Batch([huge], [], [], 40, blocks[-1].header.hash, 0))
        row = store.conn.execute(
            "SELECT expired_at FROM jobs WHERE contract = ? AND job_id = ?",
            (created.contract, created.subject),
        ).fetchone()
        assert row[0] == 2**63 - 1

    def test_a_description_holding_nul_is_stored_on_every_backend(
        self, new_db: Callable[[], str]
    ) -> None:
        """Anyone may create a job whose description holds U+0000 (valid UTF-8, a valid
        Solidity string); PostgreSQL's text refuses the character, so a raw write failed
        the batch on every retry and stopped the index there."""
        store = _store(new_db)
        blocks = Synth(seed=5).blocks(1, 30)
        batch = batch_of(blocks, finalized=20)
        read = next(r for r in batch.reads if r.kind == "getJob")
        hostile = replace(read, result={"description": 'brief\x00{"a":1}\x00'})
        reads = [hostile if r is read else r for r in batch.reads]
        store.apply_batch(replace(batch, reads=reads))
        stored = "SELECT description FROM jobs WHERE contract = ? AND job_id = ?"
        row = store.conn.execute(stored, (read.contract, read.subject)).fetchone()
        assert description_from_json(row[0]) == 'brief\x00{"a":1}\x00'
        served = detail(store.conn, "jobs", read.contract, read.subject)
        assert served is not None and json.loads(served)["description"] == 'brief\x00{"a":1}\x00'
        store.rebuild_all()  # the stored read decodes back to the same text
        again = store.conn.execute(stored, (read.contract, read.subject)).fetchone()
        assert description_from_json(again[0]) == description_from_json(row[0])

    def test_reapplying_a_batch_changes_nothing(self, new_db: Callable[[], str]) -> None:
        """The same batch twice gives the same tables and zero new events."""
        store = _store(new_db)
        batch = batch_of(Synth(seed=6).blocks(1, 15), finalized=5)
        store.apply_batch(batch)
        before = store.dump()
        again = store.apply_batch(batch)
        assert (again.new_events, again.unknown_events) == (0, 0)
        assert store.dump() == before

    def test_chunked_apply_equals_one_batch_and_rebuild_is_identical(
        self, new_db: Callable[[], str]
    ) -> None:
        """Small batches (any decode cache size), one big batch and a rebuild: identical dumps."""
        blocks = Synth(seed=7).blocks(1, 40)
        small, big = _store(new_db), _store(new_db)
        tiny_cache = _store(new_db, cache=5)
        _apply_in_chunks(small, blocks, 3, lag=0)
        _apply_in_chunks(tiny_cache, blocks, 3, lag=0)
        big.apply_batch(batch_of(blocks, finalized=40))
        assert small.dump() == big.dump() == tiny_cache.dump()
        assert len(tiny_cache.projections.decoded) == 5
        small.conn.execute("UPDATE jobs SET status = 'bogus'")
        small.conn.execute("DELETE FROM tasks")
        small.rebuild_all()
        assert small.dump() == big.dump()

    def test_overlapping_partial_batch_takes_the_full_reload_path(
        self, new_db: Callable[[], str]
    ) -> None:
        """A batch overlapping stored blocks with only some of their events still reduces right."""
        blocks = Synth(seed=16).blocks(1, 14)
        store = _store(new_db)
        store.apply_batch(batch_of(blocks[:10], finalized=0))
        overlap = batch_of(blocks[4:], finalized=0)
        dropped = [e for e in overlap.events if e.log.block_number == 6]
        assert dropped
        overlap.events = [e for e in overlap.events if e.log.block_number != 6]
        store.apply_batch(overlap)
        whole = _store(new_db)
        whole.apply_batch(batch_of(blocks, finalized=0))
        assert store.dump() == whole.dump()

    def test_batch_cannot_move_the_cursor_back(self, new_db: Callable[[], str]) -> None:
        """Going back is rollback_to's job; a batch trying it is refused and changes nothing."""
        store = _store(new_db)
        blocks = Synth(seed=18).blocks(1, 10)
        store.apply_batch(batch_of(blocks, finalized=0))
        before = store.dump()
        with pytest.raises(StateCorruptedError):
            store.apply_batch(batch_of(blocks[:5], finalized=0))
        assert store.dump() == before

    def test_window_is_pruned_below_finalized_minus_margin(self, new_db: Callable[[], str]) -> None:
        """Blocks older than finalized - keep_margin leave the window; the cursor follows."""
        store = _store(new_db)
        blocks = Synth(seed=8, events_per_block=1).blocks(1, 20)
        store.apply_batch(batch_of(blocks, finalized=15))
        assert [b.number for b in store.window()] == list(range(11, 21))
        cur = store.cursor()
        assert cur is not None
        assert (cur.indexed_block, cur.indexed_hash, cur.finalized_block) == (
            20,
            blocks[-1].header.hash,
            15,
        )

    def test_explicit_keep_from_overrides_the_margin(self, new_db: Callable[[], str]) -> None:
        """The sync engine may choose the window's lower edge itself."""
        store = _store(new_db)
        blocks = Synth(seed=8, events_per_block=1).blocks(1, 20)
        store.apply_batch(batch_of(blocks, finalized=15), keep_from=18)
        assert [b.number for b in store.window()] == [18, 19, 20]

    def test_late_contract_level_read_updates_the_legacy_job(
        self, new_db: Callable[[], str]
    ) -> None:
        """A paymentToken read arriving in a later batch than its BudgetSet still applies."""
        store = _store(new_db)
        blocks = Synth(seed=9).blocks(1, 30)
        token_reads = [r for b in blocks for r in b.reads if r.kind == "paymentToken"]
        assert token_reads
        without = batch_of(blocks, finalized=0)
        without.reads = [r for r in without.reads if r.kind != "paymentToken"]
        store.apply_batch(without)
        tokens = "SELECT count(*) FROM jobs WHERE contract = ? AND token = ?"
        assert store.conn.execute(tokens, (LEGACY_JOBS, TOKEN)).fetchone()[0] == 0
        late = Batch([], [], token_reads, 30, blocks[-1].header.hash, 0)
        assert store.apply_batch(late).touched_subjects > 0
        assert store.conn.execute(tokens, (LEGACY_JOBS, TOKEN)).fetchone()[0] > 0


class TestStampChecks:
    def test_owed_from_the_lowest_block_committed_from_log_times_until_settled(
        self, new_db: Callable[[], str]
    ) -> None:
        """What ``log_stamp_checks`` keeps across processes: the lowest block committed
        from log timestamps, found wrong once and for good, gone once the check is made."""
        store = _store(new_db)
        blocks = Synth(seed=11, events_per_block=1).blocks(1, 30)

        def stamped(chunk: list[SynthBlock], *, wrong: bool = False, times: bool = True) -> Batch:
            return replace(batch_of(chunk, finalized=0), log_stamped=times, stamps_wrong=wrong)

        store.apply_batch(batch_of(blocks[:10], finalized=0))  # headers' times: none owed
        assert store.stamp_checks() is None
        store.apply_batch(stamped(blocks[:10], wrong=True, times=False))  # nothing to check
        assert store.stamp_checks() is None
        store.apply_batch(stamped(blocks[10:20]))
        assert store.stamp_checks() == StampChecks(11, False)
        store.apply_batch(stamped(blocks[20:24], wrong=True))
        store.apply_batch(stamped(blocks[24:26]))  # believed again (a range started before)
        assert store.stamp_checks() == StampChecks(11, True)
        store.apply_batch(stamped(blocks[26:28], wrong=True, times=False))
        assert store.stamp_checks() == StampChecks(11, True)
        assert store.retime([], settled=False) == set()
        assert store.stamp_checks() == StampChecks(11, True)
        store.retime([], settled=True)
        assert store.stamp_checks() is None
        store.apply_batch(stamped(blocks[28:]))
        assert store.stamp_checks() == StampChecks(29, False)


class TestCodecs:
    def test_read_results_round_trip_exactly(self) -> None:
        """uint256, nested tuples and bools survive JSON; odd values become strings, not errors."""
        result = {"big": 2**256 - 1, "flag": True, "awards": ((TOKEN, 5, 1),), "none": None}
        stored = encode_args(result)
        assert decode_result(stored) == {
            "big": str(2**256 - 1),
            "flag": True,
            "awards": ((TOKEN, "5", "1"),),
            "none": "",
        }

    def test_fast_args_encoding_matches_json(self) -> None:
        """The hot-path encoder of decoded args gives the same bytes as the generic one."""
        event = next(e for b in Synth(seed=4).blocks(1, 5) for e in b.events if e.name)
        args = {**event.args, "flag": False, "big": 2**256 - 1}
        assert decoded_args_json(args) == encode_args(args)
        assert json.loads(decoded_args_json(args))["big"] == str(2**256 - 1)

    def test_projection_rows_are_written_only_where_they_change(self) -> None:
        """A new row is upserted, a changed one updated in its changed columns alone (an
        index on the others is left as it is), an unchanged one not written at all."""
        cols = ("chain_id", "contract", "job_id", "client", "status", "updated_block")
        one, two, new = (1, JOBS, "1"), (1, JOBS, "2"), (1, JOBS, "3")
        stored = {one: (*one, "0xc", "open", 5), two: (*two, "0xc", "open", 5)}
        rows = [(*one, "0xc", "funded", 9), (*two, "0xc", "open", 5), (*new, "0xd", "open", 9)]
        writes = row_writes("jobs", cols, rows, stored)
        update = (
            "UPDATE jobs SET status = ?, updated_block = ? "
            "WHERE chain_id = ? AND contract = ? AND job_id = ?"
        )
        upsert = next(sql for sql in writes if sql.startswith("INSERT"))
        assert writes == {upsert: [rows[2]], update: [("funded", 9, *one)]}

    def test_only_changed_projection_columns_give_the_same_rows(
        self, new_db: Callable[[], str]
    ) -> None:
        """Subjects whose lifecycles span batches (rows updated in place) end as a rebuild
        from scratch writes them."""
        store = _store(new_db)
        chain = Synth(seed=12, events_per_block=6).blocks(1, 16)
        for block in chain:
            store.apply_batch(batch_of([block], finalized=0))
        incremental = store.dump()
        assert incremental["jobs"] and incremental["tasks"]
        store.rebuild_all()
        assert store.dump() == incremental


class TestAtomicity:
    def test_failing_batch_leaves_nothing(self, new_db: Callable[[], str]) -> None:
        """A batch failing after its events were inserted rolls back events, reads and cursor."""
        store = _store(new_db)
        blocks = Synth(seed=10).blocks(1, 10)
        store.apply_batch(batch_of(blocks[:5], finalized=0))
        before = store.dump()
        bad = batch_of(blocks[5:], finalized=0)
        bad.blocks.append(BlockHeader(11, None, "0x", 0))  # type: ignore[arg-type]
        with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
            store.apply_batch(bad)
        assert not store.conn.in_transaction
        assert store.dump() == before

    def test_sigkill_mid_sync_loses_and_duplicates_nothing(self, new_db: Callable[[], str]) -> None:
        """After SIGKILL during a stream of batches the DB is a consistent prefix of the chain."""
        db = new_db()
        here = Path(__file__).parent
        script = textwrap.dedent(f"""
            import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]
            from index_builders import Synth, batch_of
            from keeper.store.db import connect
            from keeper.store.index_store import IndexStore
            from keeper.store.migrations import migrate
            conn = connect({str(db)!r}); migrate(conn)
            store = IndexStore(conn, {CHAIN}, keep_margin=4)
            blocks = Synth(seed=11, events_per_block=40).blocks(1, 400)
            print("ready", flush=True)
            for i in range(0, 400, 2):
                store.apply_batch(batch_of(blocks[i:i + 2], finalized=max(i - 10, 0)))
        """)
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # kill once the stream is well under way
                probe = IndexStore(connect(db, readonly=True), CHAIN).cursor()
                if probe is not None and probe.indexed_block >= 40:
                    break
                time.sleep(0.02)
            time.sleep(0.05)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        store = IndexStore(connect(db), CHAIN, keep_margin=4)
        cur = store.cursor()
        assert cur is not None and 0 < cur.indexed_block < 400, "kill landed mid-stream"
        top = store.conn.execute("SELECT max(block_number) FROM events").fetchone()[0]
        assert top == cur.indexed_block
        killed = store.dump()
        reference = _store(new_db)
        blocks = Synth(seed=11, events_per_block=40).blocks(1, cur.indexed_block)
        for i in range(0, len(blocks), 2):
            reference.apply_batch(batch_of(blocks[i : i + 2], finalized=max(i - 10, 0)))
        assert killed == reference.dump()
        store.rebuild_all()
        assert store.dump() == killed


class TestRollback:
    def test_rollback_then_replay_equals_fresh_apply(self, new_db: Callable[[], str]) -> None:
        """Reorg at 12: rolling back and applying the new branch equals indexing it directly."""
        main = Synth(seed=12)
        blocks_a = main.blocks(1, 20)
        branch = Synth(seed=12)
        common = branch.blocks(1, 12)
        branch.switch_fork("b")
        blocks_b = branch.blocks(13, 20, parent=common[-1].header.hash)
        assert [b.header.hash for b in common] == [b.header.hash for b in blocks_a[:12]]

        store = _store(new_db)
        _apply_in_chunks(store, blocks_a, 5, lag=10)
        above = {(e.contract, e.subject) for b in blocks_a[12:] for e in b.events if e.subject}
        touched = store.rollback_to(12)
        assert touched == above
        cur = store.cursor()
        assert cur is not None
        assert (cur.indexed_block, cur.indexed_hash) == (12, blocks_a[11].header.hash)
        assert store.window()[-1].number == 12
        store.apply_batch(batch_of(blocks_b, finalized=10))

        fresh = _store(new_db)
        _apply_in_chunks(fresh, common, 5, lag=10)
        fresh.apply_batch(batch_of(blocks_b, finalized=10))
        assert store.dump() == fresh.dump()

    def test_rollback_removes_subjects_created_above_fork(self, new_db: Callable[[], str]) -> None:
        """A job whose only events were orphaned disappears from the projections."""
        store = _store(new_db)
        blocks = Synth(seed=13).blocks(1, 10)
        store.apply_batch(batch_of(blocks, finalized=0))
        born_late = {
            e.subject
            for b in blocks[5:]
            for e in b.events
            if e.name == "JobCreated" and e.contract == JOBS
        }
        assert born_late
        store.rollback_to(5)
        ids = {
            r[0] for r in store.conn.execute("SELECT job_id FROM jobs WHERE contract = ?", (JOBS,))
        }
        assert not (born_late & ids)
        assert (
            store.conn.execute(
                "SELECT count(*) FROM chain_reads WHERE block_number > 5"
            ).fetchone()[0]
            == 0
        )

    def test_fork_below_window_is_a_deep_reorg(self, new_db: Callable[[], str]) -> None:
        """A fork point no longer in the window raises DeepReorgError and changes nothing."""
        store = _store(new_db)
        store.apply_batch(batch_of(Synth(seed=14).blocks(1, 30), finalized=30))
        before = store.dump()
        with pytest.raises(DeepReorgError) as err:
            store.rollback_to(3)
        assert err.value.depth_at_least == 27
        assert store.dump() == before

    def test_rollback_before_genesis_forgets_everything(self, new_db: Callable[[], str]) -> None:
        """Fork point -1 (the chain replaced from block 0) empties the index and the window."""
        store = _store(new_db)
        store.apply_batch(batch_of(Synth(seed=17).blocks(0, 5), finalized=0))
        assert store.rollback_to(-1)
        dump = store.dump()
        assert dump["cursor"] == [(CHAIN, -1, "0x" + "00" * 32, -1)]
        assert all(not rows for table, rows in dump.items() if table != "cursor")

    def test_status_moves_back_on_rollback(self, new_db: Callable[[], str]) -> None:
        """A job completed in an orphaned block gets back the status it had at the fork point."""
        store = _store(new_db)
        blocks = Synth(seed=15).blocks(1, 30)
        store.apply_batch(batch_of(blocks, finalized=0))
        events = [e for b in blocks for e in b.events]
        completed = next(
            e
            for e in events
            if e.name == "JobCompleted"
            and any(
                o.subject == e.subject
                and o.contract == e.contract
                and o.log.block_number < e.log.block_number
                for o in events
            )
        )
        fork = completed.log.block_number - 1
        store.rollback_to(fork)
        prefix = [e for e in events if e.log.block_number <= fork]
        reads = [r for b in blocks[:fork] for r in b.reads]
        want = reduce_job(completed.contract, completed.subject or "", prefix, reads)
        row = store.conn.execute(
            "SELECT status FROM jobs WHERE contract = ? AND job_id = ?",
            (completed.contract, completed.subject),
        ).fetchone()
        assert row[0] == want.status.label != "completed"


def disputed_tasks_ids(store: IndexStore) -> set[str]:
    return {t.task_id for t in disputed_tasks(store.conn, CHAIN)}


class TestObservations:
    """Reads no event called for (keeper.domain.reads, observation kinds)."""

    def _in(
        self, store: IndexStore, blocks: list[SynthBlock], status: TaskStatus
    ) -> tuple[str, int]:
        """A task in ``status`` at the top block, and the block of its last event."""
        rows = store.conn.execute(
            "SELECT * FROM tasks WHERE status = ?", (status.label,)
        ).fetchall()
        last = {}
        for e in (e for b in blocks for e in b.events if e.contract == TASKS):
            last[e.subject] = e.log.block_number
        top = blocks[-1].header.number
        # a Disputed one with a resolver: the keeper probes only those
        task = next(
            t
            for t in map(task_from_row, rows)
            if last[t.task_id] < top and (status is not TaskStatus.DISPUTED or t.dispute_resolver)
        )
        return task.task_id, last[task.task_id]

    def _status(self, store: IndexStore, task_id: str) -> TaskStatus:
        row = store.conn.execute(
            "SELECT * FROM tasks WHERE contract = ? AND task_id = ?", (TASKS, task_id)
        ).fetchone()
        return task_from_row(row).status

    @pytest.mark.parametrize(
        ("kind", "status", "refused"),
        [
            (FINALIZE_SILENT, TaskStatus.APPEALING, "NotInAppealingState"),
            (RESOLVE_SILENT, TaskStatus.DISPUTED, "NotInDisputedState"),
        ],
    )
    def test_a_silent_settlement_is_kept_only_at_a_held_block_and_goes_with_it(
        self, new_db: Callable[[], str], kind: str, status: TaskStatus, refused: str
    ) -> None:
        store = _store(new_db)
        blocks = Synth(seed=3).blocks(1, 60)
        store.apply_batch(batch_of(blocks, finalized=0))
        task_id, last = self._in(store, blocks, status)
        top = blocks[-1].header
        seen = ChainRead(TASKS, task_id, kind, top.number, top.hash,
                         {"refused": refused}, "keeper simulation")  # fmt: skip
        # a block of another fork at that height: nothing a rollback would ever remove
        other = replace(seen, block_hash=block_hash(top.number, "other"))
        assert store.record_observations([other]) == set()
        assert self._status(store, task_id) is status
        # what the keeper probes (keeper.store.states.disputed_tasks)
        assert (task_id in disputed_tasks_ids(store)) is (status is TaskStatus.DISPUTED)
        assert store.record_observations([seen]) == {(TASKS, task_id)}
        assert self._status(store, task_id) is TaskStatus.ACCEPTED
        assert task_id not in disputed_tasks_ids(store)
        store.rebuild_all()  # a pure function of what is stored
        assert self._status(store, task_id) is TaskStatus.ACCEPTED
        store.rollback_to(max(last, top.number - 1))
        assert self._status(store, task_id) is status
        assert (task_id in disputed_tasks_ids(store)) is (status is TaskStatus.DISPUTED)
        assert (
            store.conn.execute(
                "SELECT count(*) FROM chain_reads WHERE kind = ?", (kind,)
            ).fetchone()[0]
            == 0
        )
