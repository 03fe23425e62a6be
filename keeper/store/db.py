"""Opening the database the one way the daemon relies on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from keeper.store.queries import refundable


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open a connection in WAL mode with autocommit off by default.

    WAL lets the API read while the indexer writes. ``synchronous=FULL``
    because a batch commit carries the cursor with its events: it must be
    durable once ``commit`` returns, or a crash could replay past a lost batch.
    ``isolation_level=None`` leaves transaction control to explicit BEGIN/COMMIT.
    """
    if readonly:
        uri = f"file:{Path(path).resolve()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=10000")
    conn.row_factory = sqlite3.Row
    # the refund a job would get now, for pages SQLite builds itself: the same
    # function as the Python rows use, exact on uint256 amounts stored as text
    conn.create_function("refundable", 3, _refundable_text, deterministic=True)
    return conn


def data_version(conn: sqlite3.Connection) -> int:
    """A number SQLite changes whenever another connection commits to the file."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _refundable_text(status: str, budget: str, settled: str) -> str:
    return str(refundable(status, int(budget), int(settled)))


# Rows ANALYZE samples per index: enough for the planner to tell a selective
# filter from a broad one, cheap enough to run while the daemon works.
ANALYSIS_LIMIT = 1000


def refresh_statistics(conn: sqlite3.Connection) -> None:
    """Give the query planner current table statistics (bounded cost).

    Without them SQLite may answer a filtered, ordered API page by sorting
    every matching row instead of walking an index already in page order.
    """
    conn.execute(f"PRAGMA analysis_limit = {ANALYSIS_LIMIT}")
    conn.execute("ANALYZE")
