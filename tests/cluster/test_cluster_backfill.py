"""``keeper backfill`` takes the indexer lease too (never a second writer beside a live indexer);
``keeper status`` names the holder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from keeper.store.db import connect
from keeper.store.leases import LeaseStore
from keeper.store.migrations import migrate

CONFIG = """
[chain]
chain_id = 31337
rpc_urls = ["http://127.0.0.1:9"]

[database]
path = "{db}"

[[contracts]]
name = "acp"
protocol = "erc8183"
address = "0x{addr}"
"""


def _backfill(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "k.toml"
    cfg.write_text(CONFIG.format(db=tmp_path / "k.db", addr="12" * 20))
    return subprocess.run(
        [sys.executable, "-m", "keeper", "backfill", "--config", str(cfg)],
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


def test_backfill_takes_a_free_lease_and_releases_it(tmp_path: Path) -> None:
    """With no daemon it proceeds (here to the unreachable node) and hands the lease back."""
    done = _backfill(tmp_path)
    assert "being indexed" not in done.stderr
    conn = connect(tmp_path / "k.db")
    row = LeaseStore(conn, "indexer", 31337).current()
    assert row is not None and row.node.endswith("/backfill")
    now = LeaseStore(conn, "indexer", 31337).try_acquire("d:2:cd", "d", 10.0, startup=False)
    assert now.after is not None and now.after.holder == "d:2:cd"  # released: free at once
