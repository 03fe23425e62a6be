"""Migrations 7 and 8 (events keyed by block number, redundant status indexes gone;
subject versions) on a database holding data at version 6, and migration 12 (job
descriptions kept as JSON) on one at version 11, on both backends: nothing lost, and the
store goes on from it exactly as from a fresh one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from index_builders import Synth, batch_of
from support.postgres import PostgresServer

from keeper.store import migrations
from keeper.store.db import Db, connect, dialect
from keeper.store.index_rows import description_json
from keeper.store.index_store import INDEX_TABLES, IndexStore
from keeper.store.subjects import detail

CHAIN = 31337
BEFORE = 6  # the index schema version this migration starts from
# every component's version in the release whose index schema was at BEFORE
RELEASE = {"index": BEFORE, "keeper": 3, "verify": 2}


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Each call a new, empty (unmigrated) database on the test's backend."""
    if request.param == "sqlite":
        names = iter(range(1, 100))
        return lambda: str(tmp_path / f"keeper-{next(names)}.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.database


def _indexes(conn: Db) -> set[str]:
    if dialect(conn) == "postgresql":
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
    else:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    return {str(r[0]) for r in rows}


def _primary_key(conn: Db) -> list[str]:
    if dialect(conn) == "postgresql":
        rows = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'events'::regclass "
            "AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)"
        ).fetchall()
        return [str(r[0]) for r in rows]
    rows = conn.execute("PRAGMA table_info(events)").fetchall()
    return [str(r[1]) for r in sorted((r for r in rows if r[5]), key=lambda r: r[5])]


# what a store before migration 12 kept in jobs.description: the text itself
_RAW_DESCRIPTIONS = {
    "sqlite": "UPDATE jobs SET description = json_extract(description, '$')",
    "postgresql": "UPDATE jobs SET description = description::json #>> '{}'",
}


def _descriptions_as_before_12(conn: Db) -> None:
    conn.execute("BEGIN")
    conn.execute(_RAW_DESCRIPTIONS[dialect(conn)])
    conn.execute("COMMIT")


def _at(release: dict[str, int], url: str, monkeypatch: pytest.MonkeyPatch) -> Db:
    """A database migrated as far as ``release`` (each component's version) goes."""
    conn = connect(url)
    every = migrations.component_migrations
    with monkeypatch.context() as m:
        m.setattr(migrations, "component_migrations", lambda c: every(c)[: release[c]])
        migrations.migrate(conn)
    assert migrations.current_versions(conn) == release
    return conn


def _copy_rows(src: Db, dst: Db, tables: Iterable[str]) -> None:
    dst.execute("BEGIN IMMEDIATE")
    for table in tables:
        cur = src.execute(f"SELECT * FROM {table}")
        cols = [d[0] for d in cur.description]
        marks = ", ".join("?" * len(cols))
        dst.executemany(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})",
            [tuple(r) for r in cur.fetchall()],
        )
    dst.execute("COMMIT")


def test_version_6_with_data_migrates_and_goes_on_like_a_fresh_database(
    empty_db: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    synth = Synth(seed=7, events_per_block=5)
    chain = synth.blocks(1, 14)
    synth.switch_fork("b")
    branch = synth.blocks(11, 18, parent=chain[9].header.hash)

    old = _at(RELEASE, empty_db(), monkeypatch)
    every = migrations.component_migrations
    assert {"events_block", "jobs_status", "tasks_status"} <= _indexes(old)
    # today's store writes tables later migrations add, so the version 6 data is what it
    # wrote on a current database, row for row (the index tables' columns are unchanged),
    # but for the descriptions, which it kept as their text before migration 12
    source_conn = connect(empty_db())
    migrations.migrate(source_conn)
    source = IndexStore(source_conn, CHAIN, keep_margin=64)
    for i in range(0, len(chain), 4):
        source.apply_batch(batch_of(chain[i : i + 4], finalized=0))
    before = source.dump()
    assert before["events"] and before["jobs"] and before["tasks"]
    _copy_rows(source_conn, old, INDEX_TABLES)
    _descriptions_as_before_12(old)

    assert migrations.migrate(old) == {c: len(every(c)) - v for c, v in RELEASE.items()}
    assert _primary_key(old) == ["chain_id", "block_number", "block_hash", "log_index"]
    assert not {"events_block", "jobs_status", "tasks_status"} & _indexes(old)
    assert {"events_subject", "events_kind_time"} <= _indexes(old)
    store = IndexStore(old, CHAIN, keep_margin=64)
    assert store.dump() == before

    fresh_conn = connect(empty_db())
    migrations.migrate(fresh_conn)
    fresh = IndexStore(fresh_conn, CHAIN, keep_margin=64)
    fresh.apply_batch(batch_of(chain, finalized=0))
    assert fresh.dump() == before
    # a replay, a reorg and a full rebuild on the migrated database, as on the fresh one
    for s in (store, fresh):
        s.apply_batch(batch_of(chain[-4:], finalized=0))
        s.rollback_to(10)
        s.apply_batch(batch_of(branch, finalized=0))
    assert store.dump() == fresh.dump()
    store.rebuild_all()
    assert store.dump() == fresh.dump()


def test_version_11_descriptions_become_the_json_strings_the_store_writes(
    empty_db: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 12 turns each description into exactly what ``description_json`` gives,
    whatever it holds (quotes, backslashes, control characters, non-ASCII), so rows
    migrated and rows written later compare equal, and the API serves the same text."""
    hostile = 'q"\\ \x01\x1f\n\t\x7f \u2028 é 😀 </script> {"x":1}'
    chain = Synth(seed=7, events_per_block=5).blocks(1, 14)
    source_conn = connect(empty_db())
    migrations.migrate(source_conn)
    source = IndexStore(source_conn, CHAIN, keep_margin=64)
    source.apply_batch(batch_of(chain, finalized=0))
    contract, job_id = source_conn.execute("SELECT contract, job_id FROM jobs").fetchone()
    source_conn.execute("BEGIN")
    source_conn.execute(
        "UPDATE jobs SET description = ? WHERE job_id = ?", (description_json(hostile), job_id)
    )
    source_conn.execute("COMMIT")
    before = source.dump()

    every = migrations.component_migrations
    release = {c: len(every(c)) for c in migrations.COMPONENTS} | {"index": 11}
    old = _at(release, empty_db(), monkeypatch)
    _copy_rows(source_conn, old, INDEX_TABLES)
    _descriptions_as_before_12(old)
    raw = old.execute("SELECT description FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    assert raw[0] == hostile  # as a store before 12 kept it

    assert migrations.migrate(old)["index"] == 1
    store = IndexStore(old, CHAIN, keep_margin=64)
    assert store.dump() == before
    served = detail(old, "jobs", contract, job_id)
    assert served is not None and json.loads(served)["description"] == hostile
