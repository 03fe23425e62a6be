"""The WAL-index header tells whether anything committed, with no statement run."""

from __future__ import annotations

import struct
from pathlib import Path

from keeper.store.commitwatch import WALINDEX_VERSION, CommitWatch
from keeper.store.db import connect


def test_the_header_moves_with_every_commit_and_only_then(tmp_path: Path) -> None:
    path = tmp_path / "watched.db"
    writer = connect(path)
    writer.execute("CREATE TABLE t (n INTEGER)")
    reader = connect(path, readonly=True)
    assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    watch = CommitWatch(path)
    first = watch.header()
    assert first is not None and len(first) == 48
    reader.execute("SELECT count(*) FROM t").fetchone()  # reads commit nothing
    assert watch.header() == first
    seen = {first}
    for n in range(3):
        writer.execute("INSERT INTO t VALUES (?)", (n,))
        now = watch.header()
        assert now is not None and now not in seen  # each commit, a header never seen
        seen.add(now)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (9)")
    before_commit = watch.header()
    writer.execute("ROLLBACK")
    assert watch.header() == before_commit  # a rolled-back write changes nothing visible
    watch.close()
    assert watch.header() is None
    reader.close()
    writer.close()


def test_without_shared_memory_it_cannot_tell(tmp_path: Path) -> None:
    """A database not in WAL mode (or not opened yet) has no -shm: always "ask"."""
    assert CommitWatch(tmp_path / "absent.db").header() is None


def test_a_watch_made_before_the_writer_starts_watching_once_it_does(tmp_path: Path) -> None:
    path = tmp_path / "late.db"
    watch = CommitWatch(path)
    assert watch.header() is None
    writer = connect(path)
    writer.execute("CREATE TABLE t (n INTEGER)")
    first = watch.header()
    assert first is not None
    writer.execute("INSERT INTO t VALUES (1)")
    assert watch.header() not in (None, first)
    writer.close()


def test_the_header_read_is_the_version_whose_layout_it_assumes(tmp_path: Path) -> None:
    """The real SQLite's header names the version and is initialised."""
    path = tmp_path / "versioned.db"
    writer = connect(path)
    writer.execute("CREATE TABLE t (n INTEGER)")
    watch = CommitWatch(path)
    header = watch.header()
    assert header is not None
    assert struct.unpack_from("=I", header)[0] == WALINDEX_VERSION
    watch.close()
    writer.close()


def _shm(path: Path, version: int, is_init: int) -> None:
    copy = struct.pack("=III", version, 0, 7) + bytes([is_init]) + bytes(35)
    Path(f"{path}-shm").write_bytes(copy + copy)


def test_another_layout_or_an_uninitialised_header_cannot_tell(tmp_path: Path) -> None:
    """A WAL-index of another version (a SQLite that changed the layout) or one not
    initialised yet makes every look "ask the database", never "nothing changed"."""
    path = tmp_path / "foreign.db"
    _shm(path, WALINDEX_VERSION, 1)
    assert CommitWatch(path).header() is not None  # the same bytes, the known version
    _shm(path, WALINDEX_VERSION + 1, 1)
    assert CommitWatch(path).header() is None
    _shm(path, WALINDEX_VERSION, 0)
    assert CommitWatch(path).header() is None
