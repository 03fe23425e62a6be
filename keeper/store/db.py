"""Opening the database the one way the daemon relies on, on either backend.

A ``Db`` is a ``sqlite3.Connection`` (the embedded default) or a
:class:`~keeper.store.pg.PgConnection` (``[database] url``); both take the
store's statements as written (``?`` placeholders, explicit BEGIN/COMMIT).
Where the SQL differs, the store module asks :func:`dialect` and keeps both
texts side by side.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, cast

from keeper.errors import DatabaseUnavailableError
from keeper.store.queries import refundable

if TYPE_CHECKING:
    from keeper.store.pg import PgConnection, PgRow

__all__ = [
    "ANALYSIS_LIMIT",
    "Db",
    "DbCursor",
    "DbRow",
    "Dialect",
    "connect",
    "data_version",
    "dialect",
    "is_lock_timeout",
    "is_missing_table",
    "is_url",
    "refresh_statistics",
    "session",
    "table_columns",
    "table_names",
    "transient_errors",
    "write_transaction",
]

Dialect = Literal["sqlite", "postgresql"]
# a result row: by position and by column name on both backends
DbRow: TypeAlias = "sqlite3.Row | PgRow"


class DbCursor(Protocol):
    """What the store reads from a statement's result, on both backends."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Db(Protocol):
    """The connection the store takes: ``sqlite3.Connection`` or ``PgConnection``."""

    def execute(self, sql: str, parameters: Any = ..., /) -> DbCursor: ...

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> DbCursor: ...

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


def _psycopg() -> Any:
    """psycopg, if this process has loaded it, else None.

    Its errors can only be raised once a PostgreSQL connection has imported it
    (keeper.store.pg), so a process on SQLite never pays for the import (about
    100 ms of every command's start-up) just to name them in an ``except``.
    """
    return sys.modules.get("psycopg")


def transient_errors() -> tuple[type[Exception], ...]:
    """What a statement may meet that a later try can get past, on either backend: SQLite
    locked past its busy timeout or disk trouble, a PostgreSQL server gone or restarting."""
    pg = _psycopg()
    found: tuple[type[Exception], ...] = (sqlite3.OperationalError, DatabaseUnavailableError)
    return found if pg is None else (*found, pg.OperationalError)


def is_lock_timeout(exc: BaseException) -> bool:
    """A PostgreSQL statement that waited out its ``lock_timeout`` (SQLite has none)."""
    pg = _psycopg()
    return pg is not None and isinstance(exc, pg.errors.LockNotAvailable)


def dialect(conn: Db) -> Dialect:
    """Which SQL the connection takes: a PostgreSQL one says so (``dialect``), SQLite's do not."""
    return "postgresql" if getattr(conn, "dialect", None) == "postgresql" else "sqlite"


@contextmanager
def write_transaction(conn: Db) -> Iterator[Db]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (KeyboardInterrupt too).

    On SQLite IMMEDIATE takes the write lock up front, so two writers never
    deadlock upgrading a read lock; on PostgreSQL it is a READ COMMITTED
    transaction (row locks are taken as statements run). A COMMIT that fails
    (a disk full, a deferred constraint) may leave the transaction open, and
    the connection's next ``BEGIN`` would fail for good: it is rolled back too.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def is_missing_table(exc: Exception) -> bool:
    """The error a statement gets on a database not yet migrated to have its table."""
    pg = _psycopg()
    if pg is not None and isinstance(exc, pg.errors.UndefinedTable):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc)


def is_url(target: str | Path) -> bool:
    """A PostgreSQL URL (``[database] url``) rather than a SQLite file path."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def connect(target: str | Path, *, readonly: bool = False) -> Db:
    """A connection to a SQLite file or, given a ``postgresql://`` URL, a PostgreSQL database."""
    if is_url(target):
        from keeper.store.pg import PgConnection

        return PgConnection(str(target), readonly=readonly)
    return connect_sqlite(target, readonly=readonly)


def session(conn: Db, sql: str) -> None:
    """Run per-session setup (a temporary table): again after a PostgreSQL reconnect."""
    if dialect(conn) == "postgresql":
        cast("PgConnection", conn).session(sql)
    else:
        conn.execute(sql)


def table_columns(conn: Db, table: str) -> list[str]:
    """A table's column names in declaration order."""
    if dialect(conn) == "postgresql":
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = ? ORDER BY ordinal_position",
            (table,),
        ).fetchall()
        return [str(r[0]) for r in rows]
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})").fetchall()]


def table_names(conn: Db) -> set[str]:
    """The tables this database has (of the schema the connection uses)."""
    if dialect(conn) == "postgresql":
        sql = (
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    return {str(r[0]) for r in conn.execute(sql)}


# Bytes per page of a new SQLite database (SQLite's default is 4096); the commit path
# measured with both sizes is in bench/README.md
PAGE_SIZE: Final = 16_384


def connect_sqlite(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open a connection in WAL mode with autocommit off by default.

    WAL lets the API read while the indexer writes. A new database gets
    ``PAGE_SIZE`` pages: an event lands in four B-trees (the table, its key and
    two indexes) and a batch's job rows in several more, and with larger pages
    a batch dirties, splits and writes back fewer of them; an existing
    database keeps the size it was made with (SQLite fixes it at creation, and
    under WAL even VACUUM cannot change it). ``synchronous=FULL``
    because a batch commit carries the cursor with its events: it must be
    durable once ``commit`` returns, or a crash could replay past a lost batch.
    ``isolation_level=None`` leaves transaction control to explicit BEGIN/COMMIT.
    Read-only connections do not map the file: the pages a scan touches would count
    in the process's RSS (bench/README.md, 2 December).
    """
    if readonly:
        uri = f"file:{Path(path).resolve()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # before WAL writes the first page
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=10000")
    conn.row_factory = sqlite3.Row
    # the refund a job would get now, for pages SQLite builds itself: the same
    # function as the Python rows use, exact on uint256 amounts stored as text
    conn.create_function("refundable", 3, _refundable_text, deterministic=True)
    return conn


def data_version(conn: Db) -> int:
    """A number that changes whenever another connection commits (SQLite: to the file).

    PostgreSQL has no such counter: the current WAL position stands in (it
    moves on every commit anywhere in the cluster, so a reader may refresh
    more often than needed, never less); on a standby, the position replayed.
    """
    if not isinstance(conn, sqlite3.Connection):
        row: Any = conn.execute(_WAL_POSITION).fetchone()
        return int(row[0])
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


# pg_current_wal_lsn() refuses to run during recovery (a read replica)
_WAL_POSITION = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn"
)


def _refundable_text(status: str, budget: str, settled: str) -> str:
    return str(refundable(status, int(budget), int(settled)))


# Rows ANALYZE samples per index: enough for the planner to tell a selective
# filter from a broad one, cheap enough to run while the daemon works.
ANALYSIS_LIMIT = 1000


def refresh_statistics(conn: Db) -> None:
    """Give the query planner current table statistics (bounded cost).

    Without them SQLite may answer a filtered, ordered API page by sorting
    every matching row instead of walking an index already in page order.
    PostgreSQL's autovacuum keeps its own; an explicit ANALYZE samples too.
    """
    if dialect(conn) == "postgresql":
        conn.execute("ANALYZE")
        return
    conn.execute(f"PRAGMA analysis_limit = {ANALYSIS_LIMIT}")
    conn.execute("ANALYZE")
