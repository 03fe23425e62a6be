"""``keeper backfill`` takes the indexer lease too (never a second writer beside a live indexer);
``keeper status`` names the holder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.store.db import connect
from keeper.store.leases import LeaseStore
from keeper.store.migrations import migrate

CONFIG = """
[chain]
chain_id = 31337
rpc_urls = ["{rpc}"]

[database]
path = "{db}"

[[contracts]]
name = "acp"
protocol = "erc8183"
address = "0x{addr}"
"""


def _backfill(tmp_path: Path, rpc: str = "http://127.0.0.1:9") -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "k.toml"
    cfg.write_text(CONFIG.format(rpc=rpc, db=tmp_path / "k.db", addr="12" * 20))
    return subprocess.run(
        [sys.executable, "-m", "keeper", "backfill", "--no-progress", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_backfill_refuses_while_a_daemon_holds_the_lease(tmp_path: Path) -> None:
    conn = connect(tmp_path / "k.db")
    migrate(conn)
    leases = LeaseStore(conn, "indexer", 31337)
    leases.try_acquire("daemon-a:1:ab", "daemon-a", 600.0, startup=True)
    done = _backfill(tmp_path)
    assert done.returncode != 0
    assert "being indexed by daemon-a:1:ab" in done.stderr, done.stderr
    # nothing was written, and the daemon's lease is untouched
    assert conn.execute("SELECT COUNT(*) FROM cursor").fetchone()[0] == 0
    row = leases.current()
    assert row is not None and (row.holder, row.epoch) == ("daemon-a:1:ab", 1)
    # and `keeper status` names the holder
    status = subprocess.run(
        [sys.executable, "-m", "keeper", "status", "--json", "--config", str(tmp_path / "k.toml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lease = json.loads(status.stdout)["indexer_lease"]
    assert (lease["holder"], lease["epoch"], lease["live"]) == ("daemon-a:1:ab", 1, True)
    assert 0 < lease["expires_in_seconds"] <= 600


def test_backfill_takes_a_free_lease_and_releases_it(
    tmp_path: Path, anvil: AnvilProcess, chain: ChainControl
) -> None:
    """With no daemon it indexes, under its own node's lease, and hands the lease back."""
    chain.mine(3)
    done = _backfill(tmp_path, anvil.url)
    assert done.returncode == 0, done.stderr
    conn = connect(tmp_path / "k.db")
    assert conn.execute("SELECT COUNT(*) FROM cursor").fetchone()[0] == 1  # it did index
    leases = LeaseStore(conn, "indexer", 31337)
    row = leases.current()
    assert row is not None and row.node.endswith("/backfill")
    assert row.expires_at <= leases.now()  # released on exit, not left to expire
    taken = leases.try_acquire("d:2:cd", "d", 10.0, startup=False)
    assert taken.after is not None and (taken.after.holder, taken.after.epoch) == ("d:2:cd", 2)


def test_db_rebuild_refuses_while_a_daemon_holds_the_lease(tmp_path: Path) -> None:
    """A rebuild rewrites every projection in one transaction: beside a live daemon it would
    hold the daemon's writes for as long. It refuses, naming the holder; once the lease is
    free it rebuilds under a lease of its own and hands it back."""
    cfg = tmp_path / "k.toml"
    cfg.write_text(CONFIG.format(rpc="http://127.0.0.1:9", db=tmp_path / "k.db", addr="12" * 20))
    conn = connect(tmp_path / "k.db")
    migrate(conn)
    leases = LeaseStore(conn, "indexer", 31337)
    leases.try_acquire("daemon-a:1:ab", "daemon-a", 600.0, startup=True)
    rebuild = [sys.executable, "-m", "keeper", "db", "rebuild", "--config", str(cfg)]
    done = subprocess.run(rebuild, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "being indexed by daemon-a:1:ab" in done.stderr, done.stderr
    assert "rebuilt" not in done.stdout
    row = leases.current()
    assert row is not None and (row.holder, row.epoch) == ("daemon-a:1:ab", 1)

    leases.release("daemon-a:1:ab", 1)
    done = subprocess.run(rebuild, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rebuilt"] is True
    row = leases.current()
    assert row is not None and row.node.endswith("/rebuild") and row.epoch == 2
    assert row.expires_at <= leases.now()  # released on exit
