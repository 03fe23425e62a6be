"""A leader stalled inside its fenced transaction on PostgreSQL: cut by the server after a lease.

On PostgreSQL the fence is an UPDATE of the lease row, so a writer that stops
between its fence and its COMMIT holds the row's lock, and a standby's
takeover waits on that lock for as long as the writer is stopped. The
daemon's session ends itself after idling a lease inside a transaction
(``idle_in_transaction_session_timeout``); this is that bound, in process and
in about a second (the process test is tests/cluster/test_cluster_indexer.py); and
the lease a standby takes after waiting on that lock runs from the moment it
got the row, not from the start of its wait. A session the server counts active
(stopped mid-statement) is ended by the standby that waited on it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psycopg
import pytest
from support.postgres import PostgresServer

from keeper.config import ClusterConfig
from keeper.errors import DatabaseUnavailableError
from keeper.leadership import Leadership
from keeper.store.db import connect

CHAIN = 31337
LEASE = 1.0


def test_a_standby_takes_over_from_a_leader_stalled_inside_its_fenced_transaction(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.database(migrated=True)
    conns = [connect(url) for _ in range(3)]
    timings = {"lease_seconds": LEASE, "renew_seconds": 0.1}
    a, b, c = (
        Leadership(conn, CHAIN, ClusterConfig(node=node, **timings))
        for conn, node in zip(conns, "abc", strict=True)
    )
    try:
        for lead in (a, b, c):
            lead.attempt()
        assert a.leading() and not b.leading() and not c.leading()
        conns[0].execute("BEGIN IMMEDIATE")
        a.fence.check()  # the writer's fence: it holds the lease row's lock from here
        # and stalls (the process stopped); a standby's next try waits on that lock for as
        # long as the stalled session lives
        takeover = threading.Thread(target=b.attempt)
        takeover.start()
        takeover.join(10)
        assert not takeover.is_alive(), "the takeover waited on the stalled leader's lock"
        row = b.leases.current()
        assert row is not None and (row.holder, row.epoch) == (b.holder, 2)
        # the lease it took runs from when it got the row, not from when it began to wait:
        # the other standby's next try finds it live
        time.sleep(LEASE * 0.3)
        c.attempt()
        assert not c.leading() and c.state.holder_seen == b.holder and c.epoch == 2
        # (b's own view dates its lease from when it sent the try, a lease ago: it leads
        # from its next renewal on)
        b.attempt()
        assert b.leading() and b.epoch == 2
        # the stalled writer wakes up: its session (and its batch) is gone
        with pytest.raises(DatabaseUnavailableError):
            conns[0].execute("SELECT 1 FROM keeper_leases")
        conns[0].execute("ROLLBACK")  # what its write transaction does next; it reconnects
        a.attempt()
        assert not a.leading() and a.state.holder_seen == b.holder
        # the new session keeps the bound
        row = (
            conns[0]
            .execute(
                "SELECT setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'"
            )
            .fetchone()
        )
        assert row[0] == str(round(LEASE * 1000))  # milliseconds
    finally:
        for conn in conns:
            conn.close()


def test_a_leader_stuck_mid_statement_is_ended_by_the_standby_that_waited(
    postgres_server: PostgresServer,
) -> None:
    """A session the server counts active (stopped mid-statement: here a statement that
    sleeps) is not ended by the idle bound; the standby's try waits a lease and a
    renewal on the row, then ends that session, and its next try takes the lease."""
    url = postgres_server.database(migrated=True)
    conns = [connect(url) for _ in range(2)]
    timings = {"lease_seconds": LEASE, "renew_seconds": 0.1}
    a, b = (
        Leadership(conn, CHAIN, ClusterConfig(node=node, **timings))
        for conn, node in zip(conns, "ab", strict=True)
    )
    stuck = psycopg.connect(url, autocommit=True)
    waiter = psycopg.connect(url, autocommit=True)  # another standby's try, waiting on the row
    waited_out: list[BaseException | None] = []
    try:
        a.attempt()
        assert a.leading()
        # a's fenced write, held open inside one long statement
        stuck.execute("BEGIN")
        stuck.execute("UPDATE keeper_leases SET epoch = epoch WHERE holder = %s", (a.holder,))
        sleeper = threading.Thread(target=_sleep_in, args=(stuck,))
        sleeper.start()
        other = threading.Thread(target=_write_lease_row, args=(waiter, a.holder, waited_out))
        other.start()
        time.sleep(LEASE * 1.2)  # the lease runs out while the statement sits there
        started = time.monotonic()
        b.attempt()  # waits out its bound on the row lock, then ends the stuck session
        waited = time.monotonic() - started
        assert not b.leading()
        assert waited >= LEASE, waited
        sleeper.join(10)
        assert stuck.closed or stuck.broken
        # the other waiter had held the table's lock as long, but was waiting, not stuck:
        # it got the row once the stuck session was gone
        other.join(10)
        assert waited_out == [None] and not waiter.broken
        b.attempt()
        assert b.leading() and b.epoch == 2
    finally:
        stuck.close()
        waiter.close()
        for conn in conns:
            conn.close()


def _sleep_in(conn: psycopg.Connection[Any]) -> None:
    """A statement that does not end by itself; the session is ended from outside."""
    with contextlib.suppress(psycopg.Error):
        conn.execute("SELECT pg_sleep(60)")


def _write_lease_row(
    conn: psycopg.Connection[Any], holder: str, outcome: list[BaseException | None]
) -> None:
    """An UPDATE of the lease row that waits on its lock for as long as it is held."""
    try:
        conn.execute("UPDATE keeper_leases SET epoch = epoch WHERE holder = %s", (holder,))
    except psycopg.Error as exc:
        outcome.append(exc)
    else:
        outcome.append(None)
