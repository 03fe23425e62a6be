"""Tests for keeper.api.dbstats: database gauge rows read from a real SQLite file."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from keeper.api.dbstats import sqlite_sources
from keeper.domain.model import Protocol
from keeper.obs.dbgauges import DatabaseCollector
from keeper.store.db import connect
from keeper.store.migrations import migrate

ACP = "0x" + "aa" * 20
TM = "0x" + "bb" * 20
USDC = "0x" + "cc" * 20


def make_db(path: Path) -> sqlite3.Connection:
    """A database migrated by the store's own migrations."""
    conn = connect(path)
    migrate(conn)
    return conn


def insert(conn: sqlite3.Connection, table: str, **values: object) -> None:
    """Insert a row, filling NOT NULL columns the test does not care about with neutral values."""
    for _cid, name, kind, notnull, _default, _pk in conn.execute(f"PRAGMA table_info({table})"):
        if notnull and name not in values:
            values[name] = (
                0
                if "INT" in str(kind).upper() or "REAL" in str(kind).upper()
                else ("{}" if str(name).endswith("_json") else "0")
            )
    cols = ",".join(values)
    marks = ",".join("?" * len(values))
    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(values.values()))


def scrape(path: Path) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    contracts = {ACP: ("acp", Protocol.ERC8183), TM: ("tm", Protocol.TASKMARKET)}
    registry.register(DatabaseCollector(sqlite_sources(path), contracts))
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (name, frozenset(labels.items()))


class TestSqliteSources:
    def test_counts_locked_amounts_and_overdue(self, tmp_path: Path) -> None:
        """Job counts, exact locked sums of funded/submitted jobs and open intents are exported."""
        path = tmp_path / "k.db"
        conn = make_db(path)
        big = 2**70
        for job_id, status, amount in (
            ("1", "funded", big),
            ("2", "submitted", 5),
            ("3", "open", 0),  # a budget may be set on an Open job; nothing is paid in
            ("4", "completed", 7),
        ):
            insert(
                conn,
                "jobs",
                contract=ACP,
                job_id=job_id,
                status=status,
                token=USDC,
                budget=str(amount or 999),
                funded_amount=str(amount),
            )
        insert(conn, "tasks", contract=TM, task_id="0x01", status="appealing", reward="40")
        insert(conn, "tasks", contract=TM, task_id="0x02", status="accepted", reward="60")
        now = time.time()
        for subject, status in (("1", "open"), ("2", "inflight"), ("4", "done")):
            conn.execute(
                "INSERT INTO keeper_intents (chain_id, contract, subject, action, protocol, status,"
                " due_at, decided_block, decided_hash, created_at, updated_at)"
                " VALUES (1, ?, ?, 'claimRefund', 'erc8183', ?, 0, 1, '0x', ?, ?)",
                (ACP, subject, status, now, now),
            )
        got = scrape(path)
        assert got[key("keeper_jobs", contract="acp", status="funded")] == 1
        assert got[key("keeper_jobs", contract="acp", status="rejected")] == 0
        assert got[key("keeper_escrow_locked", contract="acp", token=USDC)] == float(big + 5)
        assert got[key("keeper_tasks", contract="tm", status="appealing")] == 1
        assert got[key("keeper_escrow_locked", contract="tm", token="unknown")] == 40
        assert got[key("keeper_overdue_actions", contract="acp", action="claimRefund")] == 2

    def test_missing_database_yields_no_db_samples(self, tmp_path: Path) -> None:
        """A database file that does not exist yet costs the db families, not the scrape."""
        got = scrape(tmp_path / "absent.db")
        assert not [k for k in got if k[0] in ("keeper_jobs", "keeper_escrow_locked")]

    def test_unmigrated_database_yields_zero_series_only(self, tmp_path: Path) -> None:
        """With no projection tables, known contracts still show their zero status series."""
        path = tmp_path / "empty.db"
        connect(path).close()
        got = scrape(path)
        assert got[key("keeper_jobs", contract="acp", status="open")] == 0
        assert not [k for k in got if k[0] == "keeper_overdue_actions"]
