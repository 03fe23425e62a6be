"""Read queries over an index built from synthetic encoded logs, on a read-only connection."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from index_builders import ACTORS, JOBS, TASKS, Synth, batch_of

from keeper.domain.model import BlockHeader
from keeper.store import queries as q
from keeper.store import subjects, verifications
from keeper.store.db import Db, connect, dialect
from keeper.store.index_store import IndexStore
from keeper.store.migrations import migrate

CHAIN = 8453


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def indexed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[IndexStore, Db]]:
    path: Path | str = tmp_path_factory.mktemp("queries") / "index.db"
    if request.param == "postgresql":
        path = request.getfixturevalue("postgres_server").database()
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


def _items(page: subjects.Page) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(f"[{page.items}]")
    assert page.count == len(items)
    return items


def _obj(conn: Db, pairs: str) -> str:
    """A JSON object expression in the connection's dialect."""
    if dialect(conn) == "postgresql":
        return f"json_build_object({pairs})::text"
    return f"json_object({pairs})"


def _walk(conn: Db, kind: subjects.Kind, limit: int, **kwargs: Any) -> list[Any]:
    """Every item of a list, following next_key page by page."""
    wire = subjects.wire_object(kind, dialect=dialect(conn))
    seen: list[dict[str, Any]] = []
    after = None
    while True:
        page = subjects.list_page(conn, kind, wire, limit=limit, after=after, **kwargs)
        got = _items(page)
        assert len(got) <= limit
        seen += got
        after = page.next_key
        if after is None:
            return seen
        assert after == (got[-1]["created_block"], got[-1]["contract"], got[-1][f"{kind[:-1]}_id"])


class TestLists:
    def test_pages_cover_every_job_once_newest_first(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """Following next_key through small pages yields each job exactly once, in order."""
        _, conn = indexed
        items = _walk(conn, "jobs", 7, chain_id=CHAIN)
        seen = [(j["created_block"], j["contract"], j["job_id"]) for j in items]
        expected = {(r["created_block"], r["contract"], r["job_id"]) for r in _all("jobs", conn)}
        assert len(seen) == len(expected) == len(set(seen)) > 7
        assert set(seen) == expected
        assert seen == sorted(seen, reverse=True)

    def test_filters_match_a_python_filter(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """Status, contract and party filters page exactly the rows a Python filter selects,
        in page order."""
        _, conn = indexed
        rows = _all("jobs", conn)

        def order(r: sqlite3.Row) -> tuple[int, str, str]:
            return (r["created_block"], r["contract"], r["job_id"])

        for status in ("open", "funded", "completed", "expired"):
            got = _walk(conn, "jobs", 5, statuses=(status,), contract=JOBS)
            want = [r for r in rows if r["status"] == status and r["contract"] == JOBS]
            assert [j["job_id"] for j in got] == [
                r["job_id"] for r in sorted(want, key=order, reverse=True)
            ]
        both = _walk(conn, "jobs", 500, statuses=("completed", "rejected"))
        assert {j["status"] for j in both} <= {"completed", "rejected"}
        assert len(both) == sum(1 for r in rows if r["status"] in ("completed", "rejected"))
        by_client = _walk(
            conn, "jobs", 5, parties={"client": ACTORS[0].upper().replace("0X", "0x")}
        )
        assert len(by_client) == sum(1 for r in rows if r["client"] == ACTORS[0])
        tasks = _all("tasks", conn)
        worker = _walk(conn, "tasks", 500, parties={"worker": ACTORS[1]}, statuses=("accepted",))
        assert len(worker) == sum(
            1 for r in tasks if r["worker"] == ACTORS[1] and r["status"] == "accepted"
        )
        assert _walk(conn, "jobs", 50, chain_id=CHAIN + 1) == []

    def test_a_contract_filter_pages_after_any_cursor(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """With the contract filtered, a page after any key (of that contract, or of a
        contract sorting before or after it) is exactly the rows below that key."""
        _, conn = indexed
        rows = [r for r in _all("jobs", conn) if r["contract"] == JOBS]
        order = sorted(
            ((r["created_block"], r["contract"], r["job_id"]) for r in rows), reverse=True
        )
        wire = (_obj(conn, "'b', created_block, 'c', contract, 'i', job_id"), [])
        blocks = sorted({k[0] for k in order})
        keys = [k for k in order[:: max(1, len(order) // 9)]] + [
            (b, other, i) for b in blocks[1:3] for other in ("0x00", "0xff", "") for i in ("1", "")
        ]
        for after in keys:
            page = subjects.list_page(conn, "jobs", wire, contract=JOBS.upper().replace("0X", "0x"),
                                      limit=500, after=after, chain_id=CHAIN)  # fmt: skip
            got = [(j["b"], j["c"], j["i"]) for j in _items(page)]
            assert got == [k for k in order if k < after], after
        assert len(keys) > 10 and any(k < keys[0] for k in order)

    def test_any_wire_expression_and_its_parameters(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """A page of any expression holds the same rows as the wire object's page; its
        parameters bind before the filters'; a party the table lacks is refused."""
        _, conn = indexed
        tasks = subjects.list_page(conn, "tasks", (_obj(conn, "'id', task_id"), []), limit=500)
        tasks_ids = [t["id"] for t in _items(tasks)]
        assert tasks_ids == [t["task_id"] for t in _walk(conn, "tasks", 3)]
        assert tasks.count == len(_all("tasks", conn)) > 0
        named = subjects.list_page(
            conn, "tasks", (_obj(conn, "'n', CAST(? AS TEXT), 'id', task_id"), ["x"]), limit=1,
            statuses=("accepted", "open", "claimed", "submitted", "expired", "cancelled"),
        )  # fmt: skip
        assert json.loads(named.items)["n"] == "x" and named.next_key is not None
        with pytest.raises(ValueError, match="unknown party"):
            subjects.list_page(conn, "jobs", ("1", []), parties={"worker": ACTORS[0]})


class TestOne:
    def test_detail_and_its_events(self, indexed: tuple[IndexStore, sqlite3.Connection]) -> None:
        """A job's amounts are its stored decimal text; its events come in chain order."""
        _, conn = indexed
        row = conn.execute(
            "SELECT contract, job_id, budget FROM jobs WHERE budget != '0'"
        ).fetchone()
        text = subjects.detail(conn, "jobs", row["contract"], row["job_id"], chain_id=CHAIN)
        assert text is not None
        job = json.loads(text)
        assert job["budget"] == row["budget"] and isinstance(job["legacy"], bool)
        assert list(job)[: len(subjects.SUBJECTS["jobs"].fields)] == list(
            subjects.SUBJECTS["jobs"].fields
        )
        events = job["events"]
        keys = [(e["block_number"], e["log_index"]) for e in events]
        assert keys == sorted(keys) and events
        assert all(e["args"]["jobId"] == row["job_id"] for e in events)
        assert (job["contract_name"], job["verification"], job["intents"]) == (None, None, [])
        assert subjects.detail(conn, "jobs", JOBS, "999999") is None

    def test_events_carry_their_stored_args_as_written(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """A detail splices each event's ``args_json`` as stored, unparsed: that is only
        the JSON the previous ``json(args_json)`` printed if the store writes it compact."""
        _, conn = indexed
        rows = conn.execute(
            "SELECT contract, subject, args_json FROM events WHERE subject IS NOT NULL "
            "ORDER BY contract, subject, block_number, log_index"
        ).fetchall()
        assert rows
        by_subject: dict[tuple[str, str], list[str]] = {}
        for contract, subject, args in rows:
            assert json.dumps(json.loads(args), separators=(",", ":")) == args
            by_subject.setdefault((contract, subject), []).append(args)
        for (contract, subject), stored in by_subject.items():
            kind: subjects.Kind = "tasks" if contract == TASKS else "jobs"
            text = subjects.detail(conn, kind, contract, subject, chain_id=CHAIN)
            assert text is not None
            events = json.loads(text)["events"]
            assert [e["args"] for e in events] == [json.loads(a) for a in stored]
            for args in stored:
                assert f'"args":{args}' in text or f'"args" : {args}' in text

    def test_task_decodes_verdict_and_extra(
        self, indexed: tuple[IndexStore, sqlite3.Connection]
    ) -> None:
        """Task rows come back with the verdict as a label and extra as a dict."""
        _, conn = indexed
        row = conn.execute(
            "SELECT task_id, reward FROM tasks WHERE verdict_type IS NOT NULL"
        ).fetchone()
        text = subjects.detail(conn, "tasks", TASKS, row["task_id"], contract_name="tm")
        assert text is not None
        task = json.loads(text)
        assert task["verdict_type"] == "approve" and task["contract_name"] == "tm"
        assert isinstance(task["extra"], dict) and task["reward"] == row["reward"]
        assert "verification" not in task and task["contract_paused"] is False


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
        total, unknown = conn.execute(
            "SELECT count(*), count(*) - count(name) FROM events"
        ).fetchone()
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


@pytest.mark.parametrize("kind", ["jobs", "tasks"])
def test_a_detail_reads_each_table_by_its_subject(tmp_path: Path, kind: subjects.Kind) -> None:
    """The lookup's one statement finds every part by (chain, contract, subject): a part
    read through another index (the view reads' block index, picked for its order) walks
    the whole chain's rows on every request."""
    conn = connect(tmp_path / "plan.db")
    migrate(conn)
    sql = subjects.detail_statement(kind, True, subjects.present_parts(conn))
    params = {"contract": "0x" + "ab" * 20, "id": "1", "name": None, "chain": 1}
    plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    reads = [
        line for line in plan if line.startswith(("SEARCH", "SCAN")) and "subquery" not in line
    ]
    assert reads, plan
    for line in reads:
        assert line.startswith("SEARCH") and "chain_id=? AND contract=?" in line, plan


def test_the_verifiers_retry_query_seeks_the_due_retries_of_its_chain(tmp_path: Path) -> None:
    """Every verifier pass asks for the retries due: with the retry time alone indexed the
    planner read the chain's whole index and sorted it each pass (a catch-up recording
    tens of thousands of unavailable verdicts went quadratic); the chain and the retry
    time together are one seek, already in the order asked for."""
    conn = connect(tmp_path / "retry.db")
    migrate(conn)
    assert isinstance(conn, sqlite3.Connection)
    ran: list[str] = []
    conn.set_trace_callback(ran.append)
    assert verifications.due_for_retry(conn, CHAIN, now=1_000, limit=50) == []
    conn.set_trace_callback(None)
    [sql] = [s for s in ran if "FROM verifications" in s]
    plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    assert plan == [
        "SEARCH verifications USING INDEX verifications_retry "
        "(chain_id=? AND next_retry_at>? AND next_retry_at<?)"
    ], plan
