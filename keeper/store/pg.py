"""The PostgreSQL connection: the subset of ``sqlite3.Connection`` the store uses.

The store writes its statements once, with ``?`` placeholders and explicit
``BEGIN IMMEDIATE`` / ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``, as it does for
SQLite; this connection translates each statement text once (``?`` to ``%s``,
a literal ``%`` doubled; cached) and runs it on a psycopg connection in
autocommit mode, so transaction control stays the caller's, as on SQLite.
``BEGIN`` (a reader's transaction) is REPEATABLE READ: every statement of one
API page sees one snapshot, as a SQLite read transaction does. Where the two
dialects differ in more than placeholders, the store module holds both texts
side by side (:func:`keeper.store.db.dialect`).

A lost server (a restart, a failover, a cut network) surfaces as
:class:`DatabaseUnavailableError` on the statement that met it; the open
transaction is gone with the server, so a batch is all or nothing as on
SQLite. The next statement outside a transaction reconnects on its own, with
one try: the store is synchronous and runs on the daemon's event loop, so a
reconnect that waited for the server would stall every other loop (and a
stop) for as long; a try that fails is a :class:`DatabaseUnavailableError`,
which the caller's loop retries after its own, asynchronous, backoff. Only the
first connection waits for the server, for :data:`FIRST_CONNECT_SECONDS` (a
daemon started beside its database). Session state (temporary tables) is set
up again on every new session.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import psycopg
from psycopg.adapt import Dumper
from psycopg.postgres import types as pg_types
from psycopg.rows import RowMaker
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from keeper.errors import DatabaseUnavailableError
from keeper.obs.redact import redact_url

__all__ = [
    "FIRST_CONNECT_SECONDS",
    "PgConnection",
    "PgRow",
    "translate",
]

# How long the first connection waits for the server (started at the same time as the
# daemon); a reconnect later tries once (module docstring).
FIRST_CONNECT_SECONDS: Final = 30.0
CONNECT_TIMEOUT_SECONDS: Final = 5


class PgRow(Sequence[Any]):
    """A result row indexable by position and by column name, like ``sqlite3.Row``."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: tuple[Any, ...], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def keys(self) -> list[str]:
        return list(self._index)

    def __eq__(self, other: object) -> bool:
        return tuple(self._values) == (tuple(other) if isinstance(other, PgRow) else other)

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"PgRow{self._values!r}"


def _row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[PgRow]:
    index = {c.name: i for i, c in enumerate(cursor.description or ())}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(tuple(values), index)

    return make


class _BoolAsInteger(Dumper):
    """Booleans go in as 0/1: the schema's flags are INTEGER columns on both backends."""

    oid = pg_types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


# the server ending the session (a shutdown, a crash, a terminated backend, recovery, a
# session that sat in its transaction past idle_in_transaction_session_timeout)
_SHUTDOWN: Final = (
    psycopg.errors.AdminShutdown,
    psycopg.errors.CrashShutdown,
    psycopg.errors.CannotConnectNow,
    psycopg.errors.IdleInTransactionSessionTimeout,
)
# what a statement may meet when its session is gone (the timeout is an InternalError)
_SESSION_ERRORS: Final = (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout)

_BEGIN: Final = {
    "BEGIN IMMEDIATE": "BEGIN ISOLATION LEVEL READ COMMITTED",
    "BEGIN": "BEGIN ISOLATION LEVEL REPEATABLE READ",
}


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """SQLite parameter syntax to psycopg's: ``?`` to ``%s``, ``:name`` to ``%(name)s``.

    Only outside string literals and quoted names; a literal ``%`` is doubled,
    and a ``::`` cast is left alone.
    """
    stripped = sql.strip()
    if stripped.upper() in _BEGIN:
        return _BEGIN[stripped.upper()]
    out: list[str] = []
    quote = ""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if quote:
            if ch == quote:
                quote = ""
            out.append("%%" if ch == "%" else ch)
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        elif (
            ch == ":"
            and i + 1 < n
            and (sql[i + 1].isalpha() or sql[i + 1] == "_")
            and (i == 0 or sql[i - 1] != ":")
        ):
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            out.append(f"%({sql[i + 1 : j]})s")
            i = j
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _is_end(sql: str) -> bool:
    head = sql.lstrip()[:8].upper()
    return head.startswith("COMMIT") or head.startswith("ROLLBACK")


class PgConnection:
    """One PostgreSQL session that reconnects between transactions; see the module docstring."""

    dialect: Final = "postgresql"

    def __init__(self, url: str, *, readonly: bool = False) -> None:
        self.url = url
        self.readonly = readonly
        self._session_sql: list[str] = []
        self._conn: psycopg.Connection[PgRow] | None = None
        self._in_tx = False
        # sessions opened so far: 1 plus one per reconnect
        self.sessions = 0
        self._conn = self._connect_waiting()

    # --- the sqlite3.Connection subset -------------------------------------------------

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> psycopg.Cursor[PgRow]:
        conn = self._ready(sql)
        try:
            cur = conn.execute(translate(sql), parameters or None)
        except _SESSION_ERRORS as exc:
            raise self._lost(exc, sql) from None
        self._track(sql)
        return cur

    def executemany(
        self, sql: str, seq_of_parameters: Iterable[Sequence[Any]]
    ) -> psycopg.Cursor[PgRow]:
        conn = self._ready(sql)
        cur = conn.cursor()
        params = list(seq_of_parameters)
        try:
            if params:
                cur.executemany(translate(sql), params)
        except _SESSION_ERRORS as exc:
            raise self._lost(exc, sql) from None
        return cur

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def session(self, sql: str) -> None:
        """Run ``sql`` now and at the start of every later session (after a reconnect)."""
        self._session_sql.append(sql)
        # session state is private to the session: a read-only connection may make it
        if self.readonly:
            self.execute("SET default_transaction_read_only = off")
        self.execute(sql)
        if self.readonly:
            self.execute("SET default_transaction_read_only = on")

    # --- internals ----------------------------------------------------------------------

    def _track(self, sql: str) -> None:
        head = sql.lstrip()[:5].upper()
        if head == "BEGIN":
            self._in_tx = True
        elif _is_end(sql):
            self._in_tx = False

    def _ready(self, sql: str) -> psycopg.Connection[PgRow]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if self._in_tx and not _is_end(sql):
            raise DatabaseUnavailableError(
                "the PostgreSQL session was lost inside a transaction: it was rolled back"
            )
        self._in_tx = False
        try:
            self._conn = self._connect()
        except psycopg.OperationalError as exc:
            raise self._unavailable(str(exc)) from None
        return self._conn

    def _lost(self, exc: psycopg.Error, sql: str) -> Exception:
        conn = self._conn
        if conn is None:
            return exc
        if _is_end(sql):  # a COMMIT may or may not have happened: the caller re-checks
            self._in_tx = False
        gone = conn.closed or conn.broken or exc.sqlstate is None
        if gone or isinstance(exc, _SHUTDOWN):
            conn.close()  # the next statement opens a new session
            return DatabaseUnavailableError(
                f"PostgreSQL at {redact_url(self.url)} went away: {_scrub(exc, self.url)}"
            )
        return exc

    def _unavailable(self, why: str) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(
            f"cannot connect to PostgreSQL at {redact_url(self.url)}: {why}"
        )

    def _connect_waiting(self) -> psycopg.Connection[PgRow]:
        last = ""
        for attempt in Retrying(
            stop=stop_after_delay(FIRST_CONNECT_SECONDS),
            wait=wait_exponential(multiplier=0.05, max=2.0),
            retry=retry_if_exception_type(psycopg.OperationalError),
            retry_error_callback=lambda _state: None,
        ):
            with attempt:
                try:
                    return self._connect()
                except psycopg.OperationalError as exc:
                    last = str(exc)
                    if _fatal(exc):
                        break
                    raise
        raise self._unavailable(last)

    def _connect(self) -> psycopg.Connection[PgRow]:
        try:
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                row_factory=_row_factory,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
            )
        except psycopg.OperationalError as exc:
            # the driver's message may carry the URL: never let it out
            raise psycopg.OperationalError(_scrub(exc, self.url)) from None
        conn.adapters.register_dumper(bool, _BoolAsInteger)
        for sql in self._session_sql:
            conn.execute(translate(sql))
        if self.readonly:
            conn.execute("SET default_transaction_read_only = on")
        self.sessions += 1
        return conn


def _fatal(exc: psycopg.OperationalError) -> bool:
    """Errors a retry cannot fix (bad password, unknown database)."""
    text = str(exc)
    return "password authentication failed" in text or "does not exist" in text


def _scrub(exc: BaseException, url: str) -> str:
    """The driver's message with the URL and its password taken out."""
    text = str(exc).strip()
    if url:
        text = text.replace(url, redact_url(url))
    password = psycopg.conninfo.conninfo_to_dict(url).get("password")
    if password:
        text = text.replace(str(password), "***")
    return text
