"""Read queries over an index built from synthetic encoded logs, on a read-only connection."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from index_builders import ACTORS, JOBS, TASKS, Synth, batch_of

from keeper.domain.model import BlockHeader
from keeper.store import queries as q
from keeper.store.db import connect
from keeper.store.index_store import IndexStore
from keeper.store.migrations import migrate

CHAIN = 8453


@pytest.fixture(scope="module")
def indexed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[IndexStore, sqlite3.Connection]]:
    path = tmp_path_factory.mktemp("queries") / "index.db"
    writer = connect(path)
    migrate(writer)
    store = IndexStore(writer, CHAIN)
    store.apply_batch(batch_of(Synth(seed=21, events_per_block=8).blocks(1, 60), finalized=50))
    reader = connect(path, readonly=True)
    yield store, reader
    reader.close()
    writer.close()


def _all(table: str, conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(f"SELECT * FROM {table}").fetchall()


class TestLists:
    def test_pages_cover_every_job_once_newest_first(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """Following next_after through small pages yields each job exactly once, in order."""
        _, conn = indexed
        seen: list[tuple[int, str, str]] = []
        after = None
        while True:
            page = q.list_jobs(conn, limit=7, after=after, chain_id=CHAIN)
            seen += [(j["created_block"], j["contract"], j["job_id"]) for j in page.items]
            after = page.next_after
            if after is None:
                break
        expected = {(r["created_block"], r["contract"], r["job_id"]) for r in _all("jobs", conn)}
        assert len(seen) == len(expected) == len(set(seen)) > 7
        assert set(seen) == expected
        assert seen == sorted(seen, reverse=True)

    def test_filters_match_a_python_filter(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """Status and party filters return exactly the rows a plain Python filter selects."""
        _, conn = indexed
        rows = _all("jobs", conn)
        for status in ("open", "funded", "completed", "expired"):
            got = q.list_jobs(conn, status=status, contract=JOBS, limit=500).items
            want = [r for r in rows if r["status"] == status and r["contract"] == JOBS]
            assert {j["job_id"] for j in got} == {r["job_id"] for r in want}
        both = q.list_jobs(conn, status=["completed", "rejected"], limit=500).items
        assert {j["status"] for j in both} <= {"completed", "rejected"}
        assert len(both) == sum(1 for r in rows if r["status"] in ("completed", "rejected"))
        by_client = q.list_jobs(conn, client=ACTORS[0].upper().replace("0X", "0x"), limit=500)
        assert len(by_client.items) == sum(1 for r in rows if r["client"] == ACTORS[0])
        tasks = _all("tasks", conn)
        worker = q.list_tasks(conn, worker=ACTORS[1], status="accepted", limit=500).items
        assert len(worker) == sum(
            1 for r in tasks if r["worker"] == ACTORS[1] and r["status"] == "accepted"
        )
        assert q.list_jobs(conn, chain_id=CHAIN + 1).items == []

    def test_json_pages_are_the_row_pages(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """list_json selects, orders and pages exactly as list_jobs/list_tasks do."""
        _, conn = indexed
        wire = "json_object('id', job_id, 'status', status)"
        for kwargs in ({}, {"status": ["completed", "rejected"]}, {"contract": JOBS},
                       {"parties": {"client": ACTORS[0]}}):  # fmt: skip
            after = None
            while True:
                page = q.list_json(conn, "jobs", wire, limit=5, after=after, chain_id=CHAIN,
                                   **kwargs)  # fmt: skip
                parties = kwargs.get("parties", {})
                rows = q.list_jobs(
                    conn, limit=5, after=after, chain_id=CHAIN,
                    status=kwargs.get("status"), contract=kwargs.get("contract"), **parties,
                )  # fmt: skip
                assert json.loads(f"[{page.items}]") == [
                    {"id": r["job_id"], "status": r["status"]} for r in rows.items
                ]
                assert page.count == len(rows.items)
                assert page.next_after == rows.next_after
                after = page.next_after
                if after is None:
                    break
        tasks = q.list_json(conn, "tasks", "json_object('id', task_id)", limit=500)
        tasks_ids = [t["id"] for t in json.loads(f"[{tasks.items}]")]
        assert tasks_ids == [t["task_id"] for t in q.list_tasks(conn, limit=500).items]
        assert tasks.count == len(json.loads(f"[{tasks.items}]")) == len(_all("tasks", conn)) > 0
        named = q.list_json(conn, "tasks", "json_object('n', ?, 'id', task_id)", ["x"], limit=1)
        assert json.loads(named.items) == {"n": "x", "id": tasks_ids[0]}
        with pytest.raises(ValueError, match="unknown party"):
            q.list_json(conn, "jobs", wire, parties={"worker": ACTORS[0]})
        with pytest.raises(ValueError, match="unknown status"):
            q.list_json(conn, "tasks", wire, status="completed")

    def test_bad_status_and_bad_token_are_rejected(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """An unknown status label or a forged page token raises ValueError (a 400 upstream)."""
        _, conn = indexed
        with pytest.raises(ValueError, match="unknown status"):
            q.list_jobs(conn, status="review")
        with pytest.raises(ValueError, match="page token"):
            q.list_tasks(conn, after="not-a-token")
        assert q.decode_after(q.encode_after(5, JOBS, "12")) == (5, JOBS, "12")


class TestOne:
    def test_get_job_and_its_events(self, indexed: tuple[IndexStore, sqlite3.Connection]) -> None:
        """get_job returns ints for amounts; events_for lists its events in chain order."""
        _, conn = indexed
        row = conn.execute(
            "SELECT contract, job_id, budget FROM jobs WHERE budget != '0'"
        ).fetchone()
        job = q.get_job(conn, row["contract"], row["job_id"], chain_id=CHAIN)
        assert job is not None and job["budget"] == int(row["budget"])
        assert isinstance(job["legacy"], bool)
        events = q.events_for(conn, row["contract"], row["job_id"])
        keys = [(e["block_number"], e["log_index"]) for e in events]
        assert keys == sorted(keys) and events
        assert all(e["args"]["jobId"] == row["job_id"] for e in events)
        assert q.get_job(conn, JOBS, "999999") is None

    def test_get_task_decodes_verdict_and_extra(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """Task rows come back with the verdict as a label and extra as a dict."""
        _, conn = indexed
        row = conn.execute("SELECT task_id FROM tasks WHERE verdict_type IS NOT NULL").fetchone()
        task = q.get_task(conn, TASKS, row["task_id"])
        assert task is not None
        assert task["verdict_type"] == "approve"
        assert isinstance(task["extra"], dict) and isinstance(task["reward"], int)


class TestAggregates:
    def test_counts_by_status_add_up(self, indexed: tuple[IndexStore, sqlite3.Connection]) -> None:
        """Per-contract status counts sum to the number of projection rows."""
        _, conn = indexed
        counts = q.counts_by_status(conn, chain_id=CHAIN)
        assert sum(n for per in counts["jobs"].values() for n in per.values()) == len(
            _all("jobs", conn)
        )
        assert sum(counts["tasks"][TASKS].values()) == len(_all("tasks", conn))

    def test_escrow_locked_is_exact_beyond_int64(self, tmp_path: Path) -> None:
        """Sums of uint256 amounts are exact ints, and only funded/submitted jobs hold escrow."""
        conn = connect(tmp_path / "locked.db")
        migrate(conn)
        store = IndexStore(conn, CHAIN)
        store.apply_batch(batch_of(Synth(seed=22).blocks(1, 80), finalized=0))
        jobs = _all("jobs", conn)
        tasks = _all("tasks", conn)
        locked = {(r["contract"], r["token"], r["kind"]): r for r in q.escrow_locked(conn)}
        for (contract, token, kind), entry in locked.items():
            if kind == "jobs":
                held = [
                    int(r["funded_amount"])
                    for r in jobs
                    if r["contract"] == contract
                    and r["token"] == token
                    and r["status"] in ("funded", "submitted")
                ]
                promised = [
                    int(r["budget"])
                    for r in jobs
                    if r["contract"] == contract and r["token"] == token and r["status"] == "open"
                ]
                assert (entry["amount"], entry["count"]) == (sum(held), len(held))
                assert entry["open_budget"] == sum(promised)
            else:
                rewards = [
                    int(r["reward"])
                    for r in tasks
                    if r["status"] not in ("accepted", "expired", "cancelled")
                ]
                assert entry["amount"] == sum(rewards) and token == ""
        assert any(e["amount"] >= 2**64 for e in locked.values()), "test needs a uint256 sum"

    def test_status_summary(self, indexed: tuple[IndexStore, sqlite3.Connection]) -> None:
        """The summary reports the cursor, the window bounds and unknown events apart."""
        store, conn = indexed
        summary = q.status_summary(conn, CHAIN)
        cur = store.cursor()
        assert cur is not None and summary["cursor"]["indexed_block"] == cur.indexed_block == 60
        assert summary["window"]["highest"] == 60
        assert summary["window"]["lowest"] == 50 - store.keep_margin
        total, unknown = conn.execute("SELECT count(*), sum(name IS NULL) FROM events").fetchone()
        assert summary["events"] == {"total": total, "unknown": unknown} and unknown > 0

    def test_reader_sees_writes_only_after_commit(self, tmp_path: Path) -> None:
        """A read-only connection never observes a half-applied batch."""
        path = tmp_path / "wal.db"
        store = IndexStore(connect(path), CHAIN)
        migrate(store.conn)
        reader = connect(path, readonly=True)
        blocks = Synth(seed=23, events_per_block=3).blocks(1, 4)
        store.apply_batch(batch_of(blocks[:2], finalized=0))
        before = q.status_summary(reader, CHAIN)
        bad = batch_of(blocks[2:], finalized=0)
        bad.blocks.append(BlockHeader(5, None, "0x", 0))  # type: ignore[arg-type]
        with pytest.raises(sqlite3.IntegrityError):
            store.apply_batch(bad)  # fails after its events were inserted
        assert q.status_summary(reader, CHAIN) == before
        store.apply_batch(batch_of(blocks[2:], finalized=0))
        after = q.status_summary(reader, CHAIN)
        assert after["events"]["total"] > before["events"]["total"]
        assert after["cursor"]["indexed_block"] == 4
