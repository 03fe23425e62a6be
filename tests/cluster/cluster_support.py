"""Three ``keeper run`` daemons on one database (a SQLite file or PostgreSQL) and one anvil.

Each daemon gets its own node name and API port and a short lease (3 s,
renewed every 0.3 s) so a failover fits in a few seconds of test time; the
database, contracts and chain are shared. The cursor watcher reads the
shared database every few milliseconds, which is how a test proves the
cursor never moved back across a failover.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from rel_daemon import DaemonProc

from keeper.devnet.traffic import KEEPER_KEY

__all__ = [
    "LEASE",
    "RENEW",
    "CursorWatch",
    "cluster",
    "kill_all",
    "leader_of",
    "logged",
    "metric",
    "stall",
    "stop_inside_a_write",
    "stop_outside_a_write",
]

LEASE = 3.0
RENEW = 0.3


def cluster(
    config_file: Path, tmp: Path, nodes: Sequence[str], keys: Sequence[str] | None = None
) -> list[DaemonProc]:
    """One daemon per node name on the same config; a keeper only where a key is given."""
    out = []
    for i, node in enumerate(nodes):
        key = None if keys is None else keys[i]
        extra = {
            "KEEPER_CLUSTER__NODE": node,
            "KEEPER_CLUSTER__LEASE_SECONDS": str(LEASE),
            "KEEPER_CLUSTER__RENEW_SECONDS": str(RENEW),
        }
        if key is None:
            extra["KEEPER_KEEPER__ENABLED"] = "false"
        out.append(
            DaemonProc.for_config(config_file, tmp / f"{node}.log", key or KEEPER_KEY, **extra)
        )
    return out


def kill_all(daemons: Sequence[DaemonProc]) -> None:
    """SIGKILL every live daemon, a stopped (stalled) one included: a test's last word."""
    for d in daemons:
        if d.alive():
            d.kill()


def metric(daemon: DaemonProc, name: str, labels: str = 'role="indexer"') -> float | None:
    """One sample from the daemon's /metrics (None: not served or not there)."""
    reply = daemon.get("/metrics", timeout=2)
    if reply is None or reply[0] != 200:
        return None
    pattern = rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$"
    found = re.search(pattern, reply[1].decode(), re.MULTILINE)
    return None if found is None else float(found.group(1))


async def leader_of(daemons: Sequence[DaemonProc], within: float) -> DaemonProc | None:
    """The one live daemon reporting itself leader, once exactly one does."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        live = [d for d in daemons if d.alive()]
        flags = await asyncio.gather(
            *(asyncio.to_thread(metric, d, "keeper_lease_leader") for d in live)
        )
        leaders = [d for d, f in zip(live, flags, strict=True) if f == 1.0]
        if len(leaders) == 1:
            return leaders[0]
        await asyncio.sleep(0.05)
    return None


async def logged(daemon: DaemonProc, event: str, within: float) -> bool:
    """Whether the daemon logs ``event`` (a JSON log line's event name) within the time."""
    needle = f'"event": "{event}"'
    for _ in range(int(within / 0.05)):
        if needle in daemon.output():
            return True
        await asyncio.sleep(0.05)
    return needle in daemon.output()


def _writable(db: Path) -> bool:
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # "database is locked": someone is inside a write
        return False
    finally:
        conn.close()


async def stop_outside_a_write(daemon: DaemonProc, db: Path, tries: int = 50) -> int:
    """SIGSTOP the daemon at a moment it holds no write transaction; the tries it took.

    A process stopped INSIDE a write keeps the SQLite file's only write lock, and no
    other process can write (take the lease over) until it resumes or dies: the limit
    docs/scaling.md states. This stalls the leader between writes, the case a lease
    can fail over from.
    """
    assert daemon.proc is not None
    for attempt in range(1, tries + 1):
        daemon.proc.send_signal(signal.SIGSTOP)
        if await asyncio.to_thread(_writable, db):
            return attempt
        daemon.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.01)
    raise AssertionError(f"the daemon was inside a write at each of {tries} tries")


def _holds_lease_row_lock(url: str) -> bool:
    """Whether an open transaction has written a lease row (a fence or a renewal), holds
    its lock until it ends, and its session waits for the client's next statement.

    Not a session stopped in the middle of a statement's messages (a pipelined
    ``executemany``): the server counts that one active and no timeout ends it; a
    standby ends it after waiting a lease and a renewal (docs/scaling.md), which
    tests/cluster/test_lease_stall_postgres.py checks in process.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE c.relname = 'keeper_leases' AND l.mode = 'RowExclusiveLock' AND l.granted "
            "AND a.state = 'idle in transaction'"
        ).fetchone()
        return row is not None and int(row[0]) > 0


async def stop_inside_a_write(daemon: DaemonProc, url: str, tries: int = 400) -> int:
    """SIGSTOP the daemon (the leader: the only one that writes lease rows while it leads)
    inside a transaction holding the lease row's lock; the tries it took.

    The hard case on PostgreSQL: a takeover's upsert waits on that lock. The daemon's
    session ends itself (``idle_in_transaction_session_timeout``) after a lease, which
    rolls the stalled batch back and lets a standby in.
    """
    assert daemon.proc is not None
    for attempt in range(1, tries + 1):
        daemon.proc.send_signal(signal.SIGSTOP)
        if await asyncio.to_thread(_holds_lease_row_lock, url):
            return attempt
        daemon.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.003 * (attempt % 7))
    raise AssertionError(f"the daemon was outside a write at each of {tries} tries")


async def stall(daemon: DaemonProc, database: str) -> int:
    """SIGSTOP the leader the hardest way each backend can fail over from.

    SQLite: between writes (stopped inside one, it keeps the file's only write lock, a
    stated limit). PostgreSQL: inside a fenced transaction.
    """
    if database.startswith("postgresql://"):
        return await stop_inside_a_write(daemon, database)
    return await stop_outside_a_write(daemon, Path(database))


class CursorWatch:
    """Every cursor value the shared database held, sampled until stopped."""

    def __init__(self, database: str, chain_id: int, every: float = 0.01) -> None:
        self.database, self.chain_id, self.every = database, chain_id, every
        self.seen: list[int] = []
        self._task: asyncio.Task[None] | None = None

    def _open(self) -> sqlite3.Connection | psycopg.Connection[Any]:
        if self.database.startswith("postgresql://"):
            return psycopg.connect(self.database, autocommit=True)
        uri = f"file:{self.database}?mode=ro"
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    def _read(self, conn: sqlite3.Connection | psycopg.Connection[Any]) -> int | None:
        sql = "SELECT indexed_block FROM cursor WHERE chain_id = %s"
        if isinstance(conn, sqlite3.Connection):
            sql = sql.replace("%s", "?")
        row = conn.execute(sql, (self.chain_id,)).fetchone()
        return None if row is None else int(row[0])

    async def _run(self) -> None:
        conn = await asyncio.to_thread(self._open)
        try:
            while True:
                # locked (SQLite) or not migrated yet (both)
                with contextlib.suppress(sqlite3.OperationalError, psycopg.Error):
                    if isinstance(conn, psycopg.Connection) and conn.broken:
                        conn = await asyncio.to_thread(self._open)  # the server restarted
                    value = await asyncio.to_thread(self._read, conn)
                    if value is not None and (not self.seen or value != self.seen[-1]):
                        self.seen.append(value)
                await asyncio.sleep(self.every)
        finally:
            conn.close()

    async def __aenter__(self) -> CursorWatch:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def backwards(self) -> Iterator[tuple[int, int]]:
        """Every step down the cursor took (none on a chain without reorgs)."""
        for a, b in zip(self.seen, self.seen[1:], strict=False):
            if b < a:
                yield a, b
