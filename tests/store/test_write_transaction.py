"""``write_transaction`` on each backend: a COMMIT that fails leaves no transaction open.

SQLite keeps a transaction open when its COMMIT fails (a deferred constraint, a disk
full), and the connection's next ``BEGIN`` then fails, every time: a daemon whose commit
met a full disk would have stopped indexing for good once space was freed. A deferred
foreign key is the COMMIT failure both backends produce on demand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import psycopg
import pytest

from keeper.store.db import connect, write_transaction

FAILED_AT_COMMIT = (sqlite3.IntegrityError, psycopg.errors.ForeignKeyViolation)


def test_a_commit_that_fails_is_rolled_back_and_the_connection_writes_again(
    new_db: Callable[[], str],
) -> None:
    conn = connect(new_db())
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    with pytest.raises(FAILED_AT_COMMIT), write_transaction(conn):
        conn.execute("INSERT INTO child (pid) VALUES (1)")  # no parent 1: refused at COMMIT
    assert not conn.in_transaction
    with write_transaction(conn):
        conn.execute("INSERT INTO parent (id) VALUES (1)")
        conn.execute("INSERT INTO child (pid) VALUES (1)")
    assert [tuple(r) for r in conn.execute("SELECT pid FROM child")] == [(1,)]
