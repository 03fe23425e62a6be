"""The PostgreSQL backend against a real server: the same tables as SQLite, migrations
that do not race, batches that survive a crash-restart of the server, a URL never shown."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_builders import Synth, SynthBlock, batch_of
from support.postgres import PostgresServer
from support.together import at_once

from keeper import cli
from keeper.config import parse_config, redacted
from keeper.errors import DatabaseUnavailableError
from keeper.store.db import connect, connect_sqlite
from keeper.store.index_store import IndexStore
from keeper.store.migrations import COMPONENTS, component_migrations, current_versions, migrate
from keeper.store.pg import PgConnection

CHAIN = 10
INDEX_TABLES = ("events", "blocks", "cursor", "chain_reads", "jobs", "tasks")


def _clear(store: IndexStore) -> None:
    for table in INDEX_TABLES:
        store.conn.execute(f"DELETE FROM {table}")


@pytest.fixture(scope="module")
def pg_store(postgres_server: PostgresServer) -> IndexStore:
    """One migrated database for the property below (hypothesis examples share it)."""
    conn = connect(postgres_server.database())
    migrate(conn)
    return IndexStore(conn, CHAIN, keep_margin=64)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    chunk=st.integers(1, 6),
    reorgs=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 6)), max_size=3),
    seed=st.integers(0, 1000),
)
def test_same_batches_and_reorgs_give_the_same_dump_on_both_backends(
    pg_store: IndexStore, chunk: int, reorgs: list[tuple[int, int]], seed: int
) -> None:
    """Batches, rollbacks and replays applied to SQLite and PostgreSQL: identical dump()."""
    _clear(pg_store)
    lite = connect_sqlite(":memory:")
    migrate(lite)
    stores = [IndexStore(lite, CHAIN, keep_margin=64), pg_store]
    synth = Synth(seed=seed, events_per_block=4)
    chain: list[SynthBlock] = synth.blocks(1, 12)
    for store in stores:
        for i in range(0, len(chain), chunk):
            store.apply_batch(batch_of(chain[i : i + chunk], finalized=0))
    for n, (depth, grow) in enumerate(reorgs):
        fork = len(chain) - depth
        synth.switch_fork(f"fork{n}")
        branch = synth.blocks(fork + 1, fork + depth + grow, parent=chain[fork - 1].header.hash)
        chain = chain[:fork] + branch
        for store in stores:
            store.rollback_to(fork)
            for i in range(0, len(branch), chunk):
                store.apply_batch(batch_of(branch[i : i + chunk], finalized=0))
    dumps = [store.dump() for store in stores]
    assert dumps[0]["events"], "the chain has events"
    assert dumps[0] == dumps[1]
    pg_store.rebuild_all()
    assert pg_store.dump() == dumps[0]


def test_migrations_started_together_apply_once(postgres_server: PostgresServer) -> None:
    """Six connections migrating one empty database at once: no error, one set of versions."""
    url = postgres_server.database()
    conns = [connect(url) for _ in range(6)]
    applied, errors = at_once([lambda c=c: migrate(c) for c in conns])
    assert errors == []
    want = {c: len(component_migrations(c)) for c in COMPONENTS}
    # every migration was applied by exactly one of them
    assert {c: sum(a[c] for a in applied) for c in COMPONENTS} == want
    assert current_versions(conns[0]) == want
    tables = (
        conns[0]
        .execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
        .fetchone()[0]
    )
    lite = connect_sqlite(":memory:")
    migrate(lite)
    lite_tables = lite.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'")
    assert tables == lite_tables.fetchone()[0]


def test_a_crash_restart_mid_stream_loses_and_duplicates_nothing(
    postgres_server: PostgresServer,
) -> None:
    """pg_ctl restart -m immediate under a stream of batches: each batch is all or nothing,
    the store reconnects by itself once the server is back (a batch that met it down
    is applied again, as the daemon's index loop does) and the final tables equal a
    single clean run."""
    url = postgres_server.database()
    conn = connect(url)
    migrate(conn)
    assert isinstance(conn, PgConnection)
    store = IndexStore(conn, CHAIN, keep_margin=4)
    blocks = Synth(seed=3, events_per_block=30).blocks(1, 160)
    failures: list[BaseException] = []
    progress = threading.Event()

    refused: list[DatabaseUnavailableError] = []

    def stream() -> None:
        try:
            for i in range(0, len(blocks), 2):
                batch = batch_of(blocks[i : i + 2], finalized=max(i - 10, 0))
                deadline = time.monotonic() + 60
                while True:
                    try:
                        store.apply_batch(batch)
                        break
                    except DatabaseUnavailableError as exc:  # the server is restarting
                        if time.monotonic() > deadline:
                            raise
                        refused.append(exc)
                        time.sleep(0.1)
                if i >= 20:
                    progress.set()
        except BaseException as exc:  # asserted below
            failures.append(exc)

    writer = threading.Thread(target=stream)
    writer.start()
    assert progress.wait(60)
    for _ in range(2):
        postgres_server.restart_immediate()
        # what another session sees right after the crash: whole batches only (one
        # statement, so one snapshot: the writer is already committing again)
        probe = PgConnection(url)
        cursor, top = probe.execute(
            "SELECT (SELECT indexed_block FROM cursor), (SELECT max(block_number) FROM events)"
        ).fetchone()
        assert top == cursor
        probe.close()
    writer.join(120)
    assert failures == []
    assert conn.sessions >= 2, "the writer's session was cut and it reconnected"
    reference = IndexStore(connect_sqlite(":memory:"), CHAIN, keep_margin=4)
    migrate(reference.conn)
    for i in range(0, len(blocks), 2):
        reference.apply_batch(batch_of(blocks[i : i + 2], finalized=max(i - 10, 0)))
    assert store.dump() == reference.dump()


def test_a_lost_server_inside_a_transaction_is_an_error_not_a_silent_reconnect(
    postgres_server: PostgresServer,
) -> None:
    """Statements after the session died mid-transaction fail; ROLLBACK then reconnects."""
    url = postgres_server.database()
    conn = PgConnection(url)
    conn.execute("CREATE TABLE t (x BIGINT)")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES (1)")
    killer = psycopg.connect(postgres_server.url(), autocommit=True)
    killer.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
        (url.rsplit("/", 1)[1],),
    )
    killer.close()
    with pytest.raises(DatabaseUnavailableError):
        conn.execute("INSERT INTO t VALUES (2)")
    with pytest.raises(DatabaseUnavailableError):
        conn.execute("INSERT INTO t VALUES (3)")
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    assert conn.sessions == 2


def test_a_reconnect_tries_once_and_leaves_the_waiting_to_the_callers_loop(
    postgres_server: PostgresServer,
) -> None:
    """While the server is down a statement fails at once (the store runs on the daemon's
    event loop: a reconnect that waited would stall every loop); once it is back, the
    next statement reconnects. Here the server comes back a few seconds after the
    stop: a reconnect that waited for it would have succeeded instead of failing."""
    url = postgres_server.database()
    conn = PgConnection(url)
    assert conn.execute("SELECT 1").fetchone()[0] == 1
    postgres_server.pg_ctl("stop", "-m", "fast", "-w")
    back = threading.Timer(4.0, postgres_server.pg_ctl, ("start", "-w"))
    back.start()
    try:
        with pytest.raises(DatabaseUnavailableError, match="went away"):
            conn.execute("SELECT 1")  # the session ended with the server
        with pytest.raises(DatabaseUnavailableError, match="cannot connect"):
            conn.execute("SELECT 1")  # one try, while the server is still down
    finally:
        back.join()
    assert conn.execute("SELECT 2").fetchone()[0] == 2
    assert conn.sessions == 2
    conn.close()


def test_the_url_and_its_password_are_never_shown(
    postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the printed configuration and in connection errors only scheme, host and port remain."""
    secret = "s3cr3t-pw"
    url = f"postgresql://keeper:{secret}@127.0.0.1:{postgres_server.port}/nowhere"
    raw = {"chain": {"chain_id": 1, "rpc_urls": ["http://a.example"]}, "database": {"url": url}}
    config = parse_config(raw, {})
    assert config.database.target == url
    shown = repr(redacted(config)) + config.database.shown
    assert secret not in shown and "keeper:" not in shown
    assert f"127.0.0.1:{postgres_server.port}" in shown
    # trust authentication takes any password: an unknown database fails at once
    with pytest.raises(DatabaseUnavailableError) as info:
        PgConnection(url)
    assert secret not in str(info.value) and "does not exist" in str(info.value)
    assert secret not in capsys.readouterr().err


def test_a_url_and_a_path_together_are_refused() -> None:
    raw = {
        "chain": {"chain_id": 1, "rpc_urls": ["http://a.example"]},
        "database": {"path": "k.db", "url": "postgresql://u:pw@db.example/k"},
    }
    with pytest.raises(Exception, match=r"either database\.path") as info:
        parse_config(raw, {})
    assert "pw" not in str(info.value)


def test_the_cli_on_a_postgresql_database(
    postgres_server: PostgresServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """migrate, status, rebuild and config check work on a URL given by the environment and
    never print its password; backup refuses, naming the server's tools."""
    # trust authentication accepts any password: the secret travels all the way through
    url = postgres_server.database().replace("postgres@", "postgres:s3cr3t-pw@")
    config = tmp_path / "keeper.toml"
    config.write_text('[chain]\nchain_id = 31337\nrpc_urls = ["http://127.0.0.1:1"]\n')
    monkeypatch.setenv("KEEPER_DATABASE__URL", url)
    runs: dict[str, tuple[int, str, str]] = {}
    for name, args in (
        ("migrate", ("db", "migrate")),
        ("rebuild", ("db", "rebuild")),
        ("status", ("status", "--json")),
        ("check", ("config", "check")),
        ("backup", ("db", "backup", "--to", str(tmp_path / "copy.db"))),
    ):
        code = cli.main([*args, "--config", str(config)])
        out, err = capsys.readouterr()
        runs[name] = (code, out, err)
        assert "s3cr3t-pw" not in out + err, name
    assert runs["migrate"][0] == 0, runs["migrate"]
    assert json.loads(runs["migrate"][1])["applied"]["index"] > 0
    assert current_versions(PgConnection(url))["index"] > 0
    assert runs["rebuild"][0] == 0, runs["rebuild"]
    assert runs["status"][0] == 0, runs["status"]
    assert json.loads(runs["status"][1])["chain_id"] == 31337
    assert runs["check"][0] == 0
    shown = json.loads(runs["check"][1])["database"]["url"]
    assert shown == f"postgresql://***@127.0.0.1:{postgres_server.port}/…"
    assert runs["backup"][0] == 3
    assert "pg_dump" in runs["backup"][2] and "pg_basebackup" in runs["backup"][2]
    assert not (tmp_path / "copy.db").exists()
