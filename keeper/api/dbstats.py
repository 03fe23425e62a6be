"""SQLite row providers for :class:`~keeper.obs.dbgauges.DatabaseCollector`.

Here rather than in ``obs`` because it reads the store, which ``obs`` may not
import. Every row comes from :mod:`keeper.store.queries` (escrow sums exact
ints, never summed through floats) or :mod:`keeper.store.read_stats`; this
module only holds the connection and shapes the rows as the collector takes them.

Every provider tolerates a table that does not exist yet (a component not
migrated): it returns no rows rather than failing the scrape.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from keeper.obs.dbgauges import CountRows, DbGaugeSources
from keeper.store import queries
from keeper.store.db import Db, connect, is_missing_table
from keeper.store.read_stats import missing_reads

__all__ = ["UNKNOWN_TOKEN", "sqlite_sources"]

T = TypeVar("T")

# Task markets pay in one token the projection does not record; an empty
# label value would read as "no label" in PromQL.
UNKNOWN_TOKEN = "unknown"


class _ReadOnly:
    """One lazily opened read-only connection, shared by scrapes under a lock."""

    def __init__(self, path: str | Path, open_read: Callable[[], Db] | None = None) -> None:
        self._open = open_read or (lambda: connect(path, readonly=True))
        self._conn: Db | None = None
        self._lock = threading.Lock()

    def run(self, read: Callable[[Db], T], empty: T) -> T:
        with self._lock:
            if self._conn is None:
                self._conn = self._open()
            try:
                return read(self._conn)
            except Exception as exc:
                if is_missing_table(exc):
                    return empty
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def sqlite_sources(
    path: str | Path, chain_id: int | None = None, open_read: Callable[[], Db] | None = None
) -> DbGaugeSources:
    """Row providers reading ``path`` through their own read-only connection
    (``open_read``'s, e.g. a read replica's, when given)."""
    db = _ReadOnly(path, open_read)

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

    return DbGaugeSources(
        jobs=lambda: counts("jobs"),
        tasks=lambda: counts("tasks"),
        escrow_locked=locked,
        overdue_actions=lambda: db.run(lambda c: queries.overdue_intents(c, chain_id=chain_id), []),
        verdicts=lambda: db.run(
            lambda c: queries.verifications_by_status(c, chain_id=chain_id), []
        ),
        missing_reads=lambda: db.run(lambda c: missing_reads(c, chain_id=chain_id), []),
    )
