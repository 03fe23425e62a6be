"""SQLite row providers for :class:`~keeper.obs.dbgauges.DatabaseCollector`.

Here rather than in ``obs`` because it reads the store, which ``obs`` may not
import. Job/task counts and escrow sums come from :mod:`keeper.store.queries`
(exact ints, never summed through floats); the two aggregates the store does
not offer yet (verifications by status, unfinished intents by action) are
single GROUP BY queries here.

Every provider tolerates a table that does not exist yet (a component not
migrated): it returns no rows rather than failing the scrape.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from keeper.obs.dbgauges import CountRows, DbGaugeSources
from keeper.store import queries
from keeper.store.db import connect

__all__ = ["UNKNOWN_TOKEN", "sqlite_sources"]

T = TypeVar("T")

# Task markets pay in one token the projection does not record; an empty
# label value would read as "no label" in PromQL.
UNKNOWN_TOKEN = "unknown"


class _ReadOnly:
    """One lazily opened read-only connection, shared by scrapes under a lock."""

    def __init__(self, path: str | Path) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def run(self, read: Callable[[sqlite3.Connection], T], empty: T) -> T:
        with self._lock:
            if self._conn is None:
                self._conn = connect(self._path, readonly=True)
            try:
                return read(self._conn)
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return empty
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _grouped(sql: str, chain_id: int | None) -> Callable[[sqlite3.Connection], CountRows]:
    """``sql`` has a ``{where}`` slot and selects (contract, label, count)."""

    def read(conn: sqlite3.Connection) -> CountRows:
        where, params = ("WHERE chain_id = ?", (chain_id,)) if chain_id is not None else ("", ())
        rows = conn.execute(sql.format(where=where), params).fetchall()
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    return read


def sqlite_sources(path: str | Path, chain_id: int | None = None) -> DbGaugeSources:
    """Row providers reading ``path`` through their own read-only connection."""
    db = _ReadOnly(path)

    def counts(table: str) -> CountRows:
        by_table: dict[str, Any] = db.run(
            lambda c: queries.counts_by_status(c, chain_id=chain_id), {}
        )
        return [
            (contract, status, n)
            for contract, statuses in by_table.get(table, {}).items()
            for status, n in statuses.items()
        ]

    def locked() -> CountRows:
        rows: list[dict[str, Any]] = db.run(
            lambda c: queries.escrow_locked(c, chain_id=chain_id), []
        )
        return [(r["contract"], r["token"] or UNKNOWN_TOKEN, int(r["amount"])) for r in rows]

    verdicts = _grouped(
        "SELECT contract, status, COUNT(*) FROM verifications {where} GROUP BY contract, status",
        chain_id,
    )
    # Intents are written when an action falls due, so an unfinished intent is overdue.
    overdue = _grouped(
        "SELECT contract, action, COUNT(*) FROM keeper_intents {where} "
        + ("AND" if chain_id is not None else "WHERE")
        + " status != 'done' GROUP BY contract, action",
        chain_id,
    )
    return DbGaugeSources(
        jobs=lambda: counts("jobs"),
        tasks=lambda: counts("tasks"),
        escrow_locked=locked,
        overdue_actions=lambda: db.run(overdue, []),
        verdicts=lambda: db.run(verdicts, []),
    )
