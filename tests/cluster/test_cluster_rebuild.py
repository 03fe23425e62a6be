"""``keeper db rebuild`` on PostgreSQL holds the indexer lease for as long as it runs.

The rebuild is one transaction. Until this test its lease lived on the rebuild's own
session and was never renewed: PostgreSQL ended that session once it idled a lease's
length between two statements (the idle-in-transaction bound the lease sets, there to
free a stalled writer's row lock), so a rebuild with a pause longer than a lease
failed; and a daemon started beside it took the lapsed lease.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support.postgres import PostgresServer

from keeper import app
from keeper.config import load_config
from keeper.leadership import Leadership
from keeper.store.db import Db, connect
from keeper.store.index_store import IndexStore
from keeper.store.leases import LeaseLostError, LeaseStore

LEASE = 2.0
CONFIG = f"""
[chain]
chain_id = 31337
rpc_urls = ["http://127.0.0.1:9"]

[database]
url = "{{url}}"

[cluster]
lease_seconds = {LEASE}
renew_seconds = 0.5

[[contracts]]
name = "acp"
protocol = "erc8183"
address = "0x{"12" * 20}"
"""


class SlowRebuild:
    """``keeper db rebuild`` on its own thread, with a pause of three leases inside its
    transaction between two statements (its Python work over millions of stored events
    idles the session as long)."""

    def __init__(self, cfg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        redecode = IndexStore._redecode_unknown

        def slow(store: IndexStore) -> int:
            done = redecode(store)
            time.sleep(3 * LEASE)
            return done

        monkeypatch.setattr(IndexStore, "_redecode_unknown", slow)
        self.result: list[int | BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(cfg,))

    def _run(self, cfg: Path) -> None:
        try:
            self.result.append(app.run_db_rebuild(str(cfg)))
        except BaseException as exc:  # the test's thread reports what ended it
            self.result.append(exc)

    def start(self, leases: LeaseStore) -> None:
        """Started, and holding the lease."""
        self.thread.start()
        deadline = time.monotonic() + 30
        while not ((row := leases.current()) is not None and row.node.endswith("/rebuild")):
            assert self.thread.is_alive() and time.monotonic() < deadline, self.result
            time.sleep(0.02)


def _database(server: PostgresServer, tmp_path: Path) -> tuple[Path, Db]:
    """A migrated database with one subject at version 1, and the config naming it."""
    url = server.database(migrated=True)
    cfg = tmp_path / "k.toml"
    cfg.write_text(CONFIG.format(url=url))
    conn = connect(url)
    conn.execute(
        "INSERT INTO subject_versions (chain_id, contract, subject, version) "
        "VALUES (31337, ?, '1', 1)",
        ("0x" + "12" * 20,),
    )
    return cfg, conn


def _rebuilding(
    server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Db, LeaseStore, SlowRebuild]:
    """A slow rebuild of a new database, started and holding the lease."""
    cfg, conn = _database(server, tmp_path)
    leases = LeaseStore(conn, "indexer", 31337)
    rebuild = SlowRebuild(cfg, monkeypatch)
    rebuild.start(leases)
    return cfg, conn, leases, rebuild


def _version(conn: Db) -> int:
    """The subject's version, which a committed rebuild raises."""
    return int(
        conn.execute("SELECT version FROM subject_versions WHERE subject = '1'").fetchone()[0]
    )


def test_a_rebuild_longer_than_a_lease_keeps_it_and_commits(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, conn, _, rebuild = _rebuilding(postgres_server, tmp_path, monkeypatch)
    # a daemon started beside it: it stands by for as long as the rebuild runs
    config = load_config(str(cfg))
    daemon = Leadership(connect(config.database.target), 31337, config.cluster)
    led_while_rebuilding = []
    while rebuild.thread.is_alive():
        daemon.attempt()
        led_while_rebuilding.append(daemon.leading() and rebuild.thread.is_alive())
        time.sleep(0.25)
    rebuild.thread.join()
    assert rebuild.result == [0], rebuild.result
    assert len(led_while_rebuilding) >= 4 and not any(led_while_rebuilding)
    assert _version(conn) > 1
    # it handed the lease back, so the daemon takes it at once
    daemon.attempt()
    assert daemon.leading()


def test_a_rebuild_that_lost_its_lease_commits_nothing(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its fence runs at COMMIT: a lease taken from it meanwhile rolls the rebuild back."""
    _, conn, leases, rebuild = _rebuilding(postgres_server, tmp_path, monkeypatch)
    conn.execute(
        "UPDATE keeper_leases SET holder = 'other:1:ab', node = 'other', epoch = epoch + 1, "
        "expires_at = expires_at + 600"
    )
    rebuild.thread.join()
    assert len(rebuild.result) == 1 and isinstance(rebuild.result[0], LeaseLostError)
    assert _version(conn) == 1
    row = leases.current()
    assert row is not None and row.holder == "other:1:ab"
