"""The API's read side on PostgreSQL standbys (``[database] read_urls``).

An API-only daemon (``[indexer] enabled = false``) serves its pages from a
streaming standby so the primary keeps its capacity for the writers. Each
page is consistent within itself because it is one statement or one
REPEATABLE READ transaction (:mod:`keeper.store.pg`), which a hot standby
serves from one snapshot of what it has replayed. Between pages the reader
may move to another standby (or the primary) and so see a different point in
time: consistency across pages is bounded by the replica lag, which is
measured and exported.

Only the API's read connections come from here. The indexer, keeper and
verifier are handed the primary's connection by :func:`keeper.compose.build`
and never see a :class:`ReadTargets`: a keeper acting on a stale replica
could act twice (OpenZeppelin Relayer's stale-read double sends).

A standby that does not answer, that answers as a primary (promoted: it no
longer follows the primary the writers use), or that lags past
``[database] max_replica_lag_seconds`` is skipped (a log line and
``keeper_database_read_fallbacks_total``), the next one or the primary is
used, and the choice is made again on the next page; a reader on a standby
looks at its health again between pages, at most every
:data:`RECHECK_SECONDS`. Nothing here raises past the page that met the
failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from keeper.errors import DatabaseUnavailableError
from keeper.obs.logging import get_logger
from keeper.store.db import Db, DbCursor, connect

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MONITOR_APPLICATION",
    "PRIMARY",
    "Lag",
    "ReadConnection",
    "ReadTargets",
    "ReplicaCollector",
    "refusal",
]

PRIMARY: Final = "primary"
# a reader on a standby checks between pages, at most this often, that it may stay
RECHECK_SECONDS: Final = 1.0
# a standby that takes longer than this to accept a connection is skipped for this page
PROBE_TIMEOUT_SECONDS: Final = 2
# a reader that fell back (to a later standby or the primary) tries the first choice
# again after this long, between pages: a standby back from a restart is used again
RETRY_PREFERRED_SECONDS: Final = 10.0

_log = get_logger(__name__)

# seconds since the last replayed commit (NULL on a primary or before any replay),
# and the replayed WAL position in bytes; one statement, one round trip
_LAG_SQL: Final = (
    "SELECT pg_is_in_recovery(), "
    "extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, "
    "pg_last_wal_replay_lsn() - '0/0'::pg_lsn"
)
_PRIMARY_LSN_SQL: Final = "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"
# the lag sessions' name in pg_stat_activity
MONITOR_APPLICATION: Final = "keeper-replica-lag"


# what a page's reader asks a standby before and while it reads there: is it still a
# standby, and how far behind is its replay? Everything received is replayed: 0 (an idle
# primary commits nothing, and the replay timestamp ages without anything missing);
# else the age of the last transaction replayed
_HEALTH_SQL: Final = (
    "SELECT pg_is_in_recovery(), CASE WHEN pg_last_wal_receive_lsn()"
    " IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 ELSE"
    " extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END::float8"
)


def _health(row: Any) -> tuple[bool, float | None]:
    """(in recovery, lag seconds) from a row of ``_HEALTH_SQL``."""
    return bool(row[0]), None if row[1] is None else float(row[1])


def refusal(standby: bool, lag_seconds: float | None, ceiling: float) -> str | None:
    """Why pages must not be read from a target in this state; None: they may."""
    if not standby:
        return "not in recovery (promoted): it no longer follows the primary"
    if lag_seconds is not None and lag_seconds > ceiling:
        return f"replay {lag_seconds:.1f} s behind, over the {ceiling:g} s ceiling"
    return None


@dataclass(frozen=True, slots=True)
class Lag:
    """One standby's replication state as seen now; ``up`` False: it did not answer.

    ``seconds`` is the time since the last transaction it replayed: on an idle
    primary it grows although nothing is missing, so it is read beside
    ``bytes`` (the primary's WAL position minus the standby's replayed one),
    which stays 0 when the standby has everything.
    """

    name: str
    up: bool
    standby: bool = False
    seconds: float | None = None
    bytes: int | None = None


class ReadTargets:
    """The standbys in configured order (named read0, read1, ...), then the primary.

    Names, never URLs, reach logs, metrics and status (the URLs carry passwords).
    """

    def __init__(
        self,
        primary: str,
        read_urls: Sequence[str],
        *,
        max_lag_seconds: float,
        retry_preferred_seconds: float = RETRY_PREFERRED_SECONDS,
    ) -> None:
        self.primary = primary
        self.retry_preferred_seconds = retry_preferred_seconds
        self.max_lag_seconds = max_lag_seconds
        self.replicas = tuple((f"read{i}", url) for i, url in enumerate(read_urls))
        self._lock = threading.Lock()
        self._fallbacks: dict[str, int] = {name: 0 for name, _ in self.replicas}
        # one session per server for the lag figures, kept across scrapes (by name)
        self._monitor_lock = threading.Lock()
        self._monitors: dict[str, psycopg.Connection[Any]] = {}
        # the target each reading thread last chose, for status
        self.current: dict[str, str] = {}

    @property
    def preferred(self) -> str:
        """The target a reader should be on when everything answers."""
        return self.replicas[0][0] if self.replicas else PRIMARY

    def open(self) -> tuple[str, Db]:
        """A read-only connection to the first standby that answers and may serve (still a
        standby, within the lag ceiling), else the primary."""
        for name, url in self.replicas:
            import psycopg  # here, not at the top: a daemon on SQLite has no replicas

            try:
                why = self._refusal(_probe(url))
                if why is not None:
                    self.skipped(name, why)
                    continue
                conn = connect(url, readonly=True)
            except (psycopg.Error, DatabaseUnavailableError) as exc:
                self.fell_back(name, exc)
                continue
            self._chosen(name)
            return name, conn
        self._chosen(PRIMARY)
        return PRIMARY, connect(self.primary, readonly=True)

    def may_stay(self, name: str, conn: Db) -> bool:
        """Between pages: whether a reader on standby ``name`` may read its next page there."""
        why = self._refusal(_health(conn.execute(_HEALTH_SQL).fetchone()))
        if why is not None:
            self.skipped(name, why)
        return why is None

    def _refusal(self, health: tuple[bool, float | None]) -> str | None:
        return refusal(health[0], health[1], self.max_lag_seconds)

    def fell_back(self, name: str, exc: BaseException) -> None:
        self._count(name)
        _log.warning("database_replica_unavailable", replica=name, error=_kind(exc))

    def skipped(self, name: str, why: str) -> None:
        """A standby that answers but may not serve pages now."""
        self._count(name)
        _log.warning("database_replica_skipped", replica=name, reason=why)

    def _count(self, name: str) -> None:
        with self._lock:
            self._fallbacks[name] += 1

    def fallbacks(self) -> dict[str, int]:
        with self._lock:
            return dict(self._fallbacks)

    def _chosen(self, name: str) -> None:
        with self._lock:
            self.current[threading.current_thread().name] = name

    def lags(self) -> list[Lag]:
        """Each standby's lag now, for scrapes and status (not pages), on sessions kept
        open for it: one per standby and one to the primary, whatever the scrape rate."""
        with self._monitor_lock:
            lsn = self._monitored(PRIMARY, self.primary, _PRIMARY_LSN_SQL)
            primary_lsn = None if lsn is None else int(lsn[0])
            rows = [(name, self._monitored(name, url, _LAG_SQL)) for name, url in self.replicas]
        out = []
        for name, row in rows:
            if row is None:
                out.append(Lag(name, up=False))
                continue
            standby, seconds, replayed = bool(row[0]), row[1], row[2]
            behind = None
            if standby and replayed is not None and primary_lsn is not None:
                behind = max(0, primary_lsn - int(replayed))
            lag = None if seconds is None else float(seconds)
            out.append(Lag(name, True, standby, lag, behind))
        return out

    def _monitored(self, name: str, url: str, sql: str) -> tuple[Any, ...] | None:
        """One row of ``sql`` on the kept session to ``name`` (opened on first use, and
        again after a failure); None when the server does not answer."""
        import psycopg

        conn = self._monitors.get(name)
        try:
            if conn is None or conn.closed or conn.broken:
                conn = psycopg.connect(
                    url, connect_timeout=PROBE_TIMEOUT_SECONDS, autocommit=True,
                    application_name=MONITOR_APPLICATION,
                )  # fmt: skip
                self._monitors[name] = conn
            return conn.execute(sql).fetchone()
        except psycopg.Error:
            if conn is not None:
                conn.close()
            self._monitors.pop(name, None)
            return None

    def close(self) -> None:
        """Close the lag sessions (the readers close their own connections)."""
        with self._monitor_lock:
            for conn in self._monitors.values():
                conn.close()
            self._monitors.clear()

    def status(self) -> dict[str, Any]:
        """What /v1/status shows under ``database``: where pages are read and each lag."""
        return {
            "reads_from": sorted(set(self.current.values())),
            "replicas": [
                {
                    "name": lag.name,
                    "up": lag.up,
                    "standby": lag.standby,
                    "lag_seconds": lag.seconds,
                    "lag_bytes": lag.bytes,
                }
                for lag in self.lags()
            ],
            "fallbacks": self.fallbacks(),
        }


class _NoResult:
    """The answer to a COMMIT/ROLLBACK of a transaction whose server already went away."""

    rowcount = -1

    def fetchone(self) -> Any:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class ReadConnection:
    """A read-only :class:`Db` on the target :class:`ReadTargets` chooses, re-chosen on loss.

    A statement outside a transaction that finds its server gone is retried
    once on the next target (a read repeats safely); inside a transaction the
    error reaches the page (a 503), the transaction's COMMIT is a no-op, and
    the next page opens a new target. A reader that fell back tries the
    preferred target again between pages, every ``retry_preferred_seconds``.
    Every target is PostgreSQL (``read_urls`` needs ``url``), so the store's
    PostgreSQL statements are the ones it takes.
    """

    dialect: Final = "postgresql"

    def __init__(self, targets: ReadTargets) -> None:
        self._targets = targets
        self._conn: Db | None = None
        self._opened = 0.0
        self._checked = 0.0
        self._reopen()

    def execute(self, sql: str, parameters: Any = (), /) -> DbCursor:
        conn = self._conn
        if conn is None:
            if _is_end(sql):
                return _NoResult()
            conn = self._reopen()
        elif not conn.in_transaction and (self._retry_due() or not self._may_stay(conn)):
            conn.close()
            conn = self._reopen()
        began_outside = not conn.in_transaction
        try:
            return conn.execute(sql, parameters)
        except DatabaseUnavailableError as exc:
            self._lost(exc)
            if not began_outside or _is_end(sql):
                raise
        return self._reopen().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> DbCursor:
        raise TypeError("a read connection does not write")

    @property
    def in_transaction(self) -> bool:
        return self._conn is not None and self._conn.in_transaction

    @property
    def target(self) -> Db | None:
        """The connection underneath (a ``PgConnection``; None between a loss and a reopen)."""
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _lost(self, exc: BaseException) -> None:
        if self.name != PRIMARY:
            self._targets.fell_back(self.name, exc)
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _reopen(self) -> Db:
        self.name, conn = self._targets.open()
        self._conn = conn
        self._opened = self._checked = time.monotonic()
        return conn

    def _may_stay(self, conn: Db) -> bool:
        """On a standby, every RECHECK_SECONDS: still one, and within the lag ceiling (a
        standby that stopped answering is found by the statement itself)."""
        if self.name == PRIMARY or time.monotonic() - self._checked < RECHECK_SECONDS:
            return True
        self._checked = time.monotonic()
        try:
            return self._targets.may_stay(self.name, conn)
        except DatabaseUnavailableError:
            return True  # the page's own statement meets it and moves on

    def _retry_due(self) -> bool:
        if self.name == self._targets.preferred:
            return False
        return time.monotonic() - self._opened >= self._targets.retry_preferred_seconds


class ReplicaCollector(Collector):
    """Scrape-time replica gauges: up, lag in seconds and bytes, fallbacks."""

    def __init__(self, targets: ReadTargets) -> None:
        self._targets = targets

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        up, seconds, behind, fallbacks = self._families()
        for lag in self._targets.lags():
            up.add_metric([lag.name], 1.0 if lag.up and lag.standby else 0.0)
            if lag.seconds is not None:
                seconds.add_metric([lag.name], lag.seconds)
            if lag.bytes is not None:
                behind.add_metric([lag.name], float(lag.bytes))
        for name, count in sorted(self._targets.fallbacks().items()):
            fallbacks.add_metric([name], float(count))
        return [up, seconds, behind, fallbacks]

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily
    ]:
        labels = ["replica"]
        return (
            GaugeMetricFamily(
                "keeper_database_replica_up",
                "1 when the read replica answers and is a standby in recovery.",
                labels=labels,
            ),
            GaugeMetricFamily(
                "keeper_database_replica_lag_seconds",
                "Seconds since the replica replayed its last transaction (grows on an idle "
                "primary: read with keeper_database_replica_lag_bytes).",
                labels=labels,
            ),
            GaugeMetricFamily(
                "keeper_database_replica_lag_bytes",
                "WAL bytes the replica has yet to replay (primary position minus replayed).",
                labels=labels,
            ),
            CounterMetricFamily(
                "keeper_database_read_fallbacks",
                "Times an API read skipped this replica for the next one or the primary: it "
                "did not answer, answered as a primary, or lagged past the ceiling.",
                labels=labels,
            ),
        )


def _probe(url: str) -> tuple[bool, float | None]:
    """A standby's health (``_HEALTH_SQL``), failing fast on one that is down (a new
    ``PgConnection`` waits for its server)."""
    import psycopg

    with psycopg.connect(url, connect_timeout=PROBE_TIMEOUT_SECONDS) as conn:
        row = conn.execute(_HEALTH_SQL).fetchone()
    assert row is not None
    return _health(row)


def _is_end(sql: str) -> bool:
    head = sql.lstrip()[:8].upper()
    return head.startswith(("COMMIT", "ROLLBACK"))


def _kind(exc: BaseException) -> str:
    """What went wrong, without the driver's text (which may name the host and user)."""
    if isinstance(exc, DatabaseUnavailableError):
        return "unavailable"
    sqlstate = getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__}{f' {sqlstate}' if sqlstate else ''}"
