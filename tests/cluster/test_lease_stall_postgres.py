"""A leader stalled inside its fenced transaction on PostgreSQL: cut by the server after a lease.

On PostgreSQL the fence is an UPDATE of the lease row, so a writer that stops
between its fence and its COMMIT holds the row's lock, and a standby's
takeover waits on that lock for as long as the writer is stopped. The
daemon's session ends itself after idling a lease inside a transaction
(``idle_in_transaction_session_timeout``); this is that bound, in process and
in under two seconds (the process test is tests/cluster/test_cluster_indexer.py).
"""

from __future__ import annotations

import threading
import time

import pytest
from support.postgres import PostgresServer

from keeper.config import ClusterConfig
from keeper.leadership import Leadership
from keeper.store.db import connect
from keeper.store.pg import DatabaseUnavailableError

CHAIN = 31337
LEASE = 0.5


def test_a_standby_takes_over_from_a_leader_stalled_inside_its_fenced_transaction(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.database(migrated=True)
    conn_a, conn_b = connect(url), connect(url)
    timings = {"lease_seconds": LEASE, "renew_seconds": 0.1}
    a = Leadership(conn_a, CHAIN, ClusterConfig(node="a", **timings))
    b = Leadership(conn_b, CHAIN, ClusterConfig(node="b", **timings))
    try:
        a.attempt()
        b.attempt()
        assert a.leading() and not b.leading()
        conn_a.execute("BEGIN IMMEDIATE")
        a.fence.check()  # the writer's fence: it holds the lease row's lock from here
        time.sleep(LEASE * 2)  # stalled (the process stopped) for two leases
        # the takeover would wait on the row lock while the stalled session lives
        takeover = threading.Thread(target=b.attempt)
        takeover.start()
        takeover.join(10)
        assert not takeover.is_alive(), "the takeover waited on the stalled leader's lock"
        assert b.leading() and b.epoch == 2
        # the stalled writer wakes up: its session (and its batch) is gone
        with pytest.raises(DatabaseUnavailableError):
            conn_a.execute("SELECT 1 FROM keeper_leases")
        conn_a.execute("ROLLBACK")  # what its write transaction does next; it reconnects
        a.attempt()
        assert not a.leading() and a.state.holder_seen == b.holder
        # the new session keeps the bound
        row = conn_a.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert row[0] == f"{round(LEASE * 1000)}ms"
    finally:
        conn_a.close()
        conn_b.close()
