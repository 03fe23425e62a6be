"""The page size of SQLite databases: new ones get PAGE_SIZE, existing ones keep theirs
and the index store goes on from them exactly as from a new one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from index_builders import Synth, batch_of

from keeper.store.db import PAGE_SIZE, connect_sqlite
from keeper.store.index_store import IndexStore
from keeper.store.migrations import migrate

CHAIN = 31337


def _page_size(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA page_size").fetchone()[0])


def test_a_new_database_gets_the_larger_pages_in_wal_mode(tmp_path: Path) -> None:
    conn = connect_sqlite(tmp_path / "keeper.db")
    migrate(conn)
    assert PAGE_SIZE != 4096  # SQLite's own default, which the test below starts from
    assert _page_size(conn) == PAGE_SIZE
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    # the file says so too: a reader (the API's read-only connections) sees the same pages
    reader = connect_sqlite(tmp_path / "keeper.db", readonly=True)
    assert _page_size(reader) == PAGE_SIZE
    reader.close()


def test_an_existing_database_keeps_its_pages_and_indexes_like_a_new_one(
    tmp_path: Path,
) -> None:
    synth = Synth(seed=11, events_per_block=6)
    chain = synth.blocks(1, 12)
    synth.switch_fork("b")
    branch = synth.blocks(9, 15, parent=chain[7].header.hash)

    # made by an earlier release: SQLite's default pages, already in WAL mode and migrated
    old_path = tmp_path / "old.db"
    made = sqlite3.connect(old_path, isolation_level=None)
    made.execute("PRAGMA page_size = 4096")
    made.execute("PRAGMA journal_mode=WAL")
    made.close()
    old = connect_sqlite(old_path)
    migrate(old)
    assert _page_size(old) == 4096

    new = connect_sqlite(tmp_path / "new.db")
    migrate(new)
    assert _page_size(new) == PAGE_SIZE

    stores = [IndexStore(old, CHAIN, keep_margin=64), IndexStore(new, CHAIN, keep_margin=64)]
    for store in stores:
        for i in range(0, len(chain), 3):
            store.apply_batch(batch_of(chain[i : i + 3], finalized=0))
        store.rollback_to(8)
        store.apply_batch(batch_of(branch, finalized=0))
    assert stores[0].dump() == stores[1].dump()
    assert stores[0].dump()["events"] and stores[0].dump()["jobs"]
    old.close()
    reopened = connect_sqlite(old_path)
    assert _page_size(reopened) == 4096  # opening it again changed nothing
    assert IndexStore(reopened, CHAIN, keep_margin=64).dump() == stores[1].dump()
    reopened.close()
