"""SQLite row providers for :class:`~keeper.obs.dbgauges.DatabaseCollector`.

Here rather than in ``obs`` because it reads the store, which ``obs`` may not import.

Aggregate-only, read-only SQL over the projection tables. Each provider
tolerates a table or column that does not exist yet (an older schema, a
component not migrated): it returns no rows rather than failing the scrape.
Amounts are TEXT in the database and summed here as Python ints, because
SQLite's SUM over TEXT would go through floats.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from keeper.obs.dbgauges import CountRows, DbGaugeSources
from keeper.store.db import connect

__all__ = ["TERMINAL_JOB_STATUSES", "TERMINAL_TASK_STATUSES", "sqlite_sources"]

# Jobs hold escrow only once funded; Open jobs may carry a budget that was never paid in.
LOCKED_JOB_STATUSES = ("funded", "submitted")
TERMINAL_JOB_STATUSES = ("completed", "rejected", "expired")
# A task's reward is deposited at creation and leaves on these.
TERMINAL_TASK_STATUSES = ("accepted", "expired", "cancelled")
# Task markets pay in one token the projection does not record.
UNKNOWN_TOKEN = "unknown"


class _ReadOnly:
    """One lazily opened read-only connection, shared by scrapes under a lock."""

    def __init__(self, path: str | Path) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with self._lock:
            if self._conn is None:
                self._conn = connect(self._path, readonly=True)
            return [tuple(r) for r in self._conn.execute(sql, params).fetchall()]

    def columns(self, table: str) -> set[str]:
        return {str(r[1]) for r in self.rows(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _counts(db: _ReadOnly, table: str, label: str) -> Callable[[], CountRows]:
    def rows() -> CountRows:
        if not {"contract", label} <= db.columns(table):
            return []
        sql = f"SELECT contract, {label}, COUNT(*) FROM {table} GROUP BY contract, {label}"
        return [(str(c), str(s), int(str(n))) for c, s, n in db.rows(sql)]

    return rows


def _locked(db: _ReadOnly) -> CountRows:
    totals: dict[tuple[str, str], int] = defaultdict(int)
    job_cols = db.columns("jobs")
    if {"contract", "status", "budget"} <= job_cols:
        token = "token" if "token" in job_cols else "''"
        # what was paid in, when the projection tracks it; the budget otherwise
        amount_col = "funded_amount" if "funded_amount" in job_cols else "budget"
        marks = ",".join("?" * len(LOCKED_JOB_STATUSES))
        sql = f"SELECT contract, {token}, {amount_col} FROM jobs WHERE status IN ({marks})"
        for contract, tok, amount in db.rows(sql, LOCKED_JOB_STATUSES):
            totals[(str(contract), str(tok or UNKNOWN_TOKEN))] += int(str(amount or 0))
    task_cols = db.columns("tasks")
    if {"contract", "status", "reward"} <= task_cols:
        token = "token" if "token" in task_cols else "''"
        marks = ",".join("?" * len(TERMINAL_TASK_STATUSES))
        sql = f"SELECT contract, {token}, reward FROM tasks WHERE status NOT IN ({marks})"
        for contract, tok, amount in db.rows(sql, TERMINAL_TASK_STATUSES):
            totals[(str(contract), str(tok or UNKNOWN_TOKEN))] += int(str(amount or 0))
    return [(contract, tok, amount) for (contract, tok), amount in totals.items()]


def _overdue(db: _ReadOnly) -> CountRows:
    """Intents are written when an action falls due, so an unfinished intent is overdue."""
    if not {"contract", "action", "status"} <= db.columns("keeper_intents"):
        return []
    sql = (
        "SELECT contract, action, COUNT(*) FROM keeper_intents "
        "WHERE status != 'done' GROUP BY contract, action"
    )
    return [(str(c), str(a), int(str(n))) for c, a, n in db.rows(sql)]


def sqlite_sources(path: str | Path) -> DbGaugeSources:
    """Row providers reading ``path`` through their own read-only connection."""
    db = _ReadOnly(path)
    return DbGaugeSources(
        jobs=_counts(db, "jobs", "status"),
        tasks=_counts(db, "tasks", "status"),
        escrow_locked=lambda: _locked(db),
        overdue_actions=lambda: _overdue(db),
        verdicts=_counts(db, "verifications", "status"),
    )
