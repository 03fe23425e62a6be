"""SIGKILL at random moments during backfill and realtime loses and duplicates nothing."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from sync_support import fresh_index, run_traffic, table_diff, traffic, write_config
from web3 import Web3

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess, ChainControl
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import Deployment, deploy_all, send_call
from keeper.store.db import connect

KEEPER = [sys.executable, "-m", "keeper"]


@pytest.fixture
def deployed(anvil: AnvilProcess) -> Deployment:
    return deploy_all(anvil.url)


def bulk_events(rpc_url: str, deployment: Deployment, txs: int, per_tx: int) -> None:
    """``txs`` blocks of ERC-8183 job flows from the emitter (6 events per job)."""
    w3 = Web3(Web3.HTTPProvider(rpc_url))
    emitter = w3.eth.contract(
        address=Web3.to_checksum_address(deployment.emitter), abi=load_abi("EventEmitter")
    )
    party = Web3.to_checksum_address("0x" + "11" * 20)
    for i in range(txs):
        fn = emitter.functions.emitJobFlowBatch(
            10_000 + i * per_tx, per_tx, party, party, party, party, 5 * 10**6, 2**40, 3
        )
        send_call(w3, DEV_KEYS[0], fn)


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def spawn(*args: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, KEEPER_LOG__FORMAT="json")
    with log.open("ab") as out:
        return subprocess.Popen([*KEEPER, *args], stdout=out, stderr=out, env=env)


# the PostgreSQL run costs ~50 s on a busy 2-core machine: `make reliability` runs it; the
# store's own SIGKILL and server-crash tests run on PostgreSQL in every `make test`
@pytest.mark.parametrize(
    "new_db", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)], indirect=True
)
async def test_sigkill_during_backfill(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path, new_db: Callable[[], str]
) -> None:
    """Killed backfills resume from their cursor; the result equals an uninterrupted index
    (into SQLite) on either backend."""
    gen = traffic(anvil.url, deployed)
    await run_traffic(gen, 6)
    await asyncio.to_thread(bulk_events, anvil.url, deployed, 40, 25)
    cfg = write_config(
        tmp_path, "killed", [anvil.url], deployed, database=new_db(), finality="confirmations",
        confirmations=0, max_range=3, min_range=1,
    )  # fmt: skip
    config_file = str(tmp_path / "killed.toml")
    rng = random.Random(11)
    kills = 0
    for _ in range(12):
        proc = spawn("backfill", "--config", config_file, "--no-progress", log=tmp_path / "bf.log")
        await asyncio.sleep(rng.uniform(1.2, 3.0))
        if proc.poll() is not None:
            assert proc.returncode == 0, (tmp_path / "bf.log").read_text()[-2000:]
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    else:
        proc = spawn("backfill", "--config", config_file, "--no-progress", log=tmp_path / "bf.log")
        assert proc.wait(timeout=120) == 0
    assert kills >= 1, "the backfill finished before any kill: make the workload larger"
    if not cfg.database.url:
        assert integrity(Path(cfg.database.path)) == "ok"
    fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
    from sync_support import Harness

    killed = Harness(cfg)
    try:
        assert killed.indexer.start_cursor() == fresh.indexer.start_cursor()
        assert table_diff(killed.dump(), fresh.dump()) == ""
        assert killed.dump() == fresh.dump()
    finally:
        await killed.close()
        await fresh.close()


@pytest.mark.parametrize(
    "new_db", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)], indirect=True
)
async def test_sigkill_during_realtime_then_graceful_stop(
    anvil: AnvilProcess,
    chain: ChainControl,
    deployed: Deployment,
    tmp_path: Path,
    new_db: Callable[[], str],
) -> None:
    """`keeper run` killed repeatedly under live traffic converges; SIGTERM exits 0 promptly
    (on either backend)."""
    cfg = write_config(
        tmp_path, "run", [anvil.url], deployed, database=new_db(), poll_interval=0.1, window=64
    )
    config_file = str(tmp_path / "run.toml")
    gen = traffic(anvil.url, deployed)
    rng = random.Random(5)
    log = tmp_path / "run.log"
    for _ in range(4):
        proc = spawn("run", "--config", config_file, log=log)
        await run_traffic(gen, 2)
        await asyncio.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    offset = log.stat().st_size
    proc = spawn("run", "--config", config_file, log=log)
    while "daemon_started" not in log.read_text()[offset:]:
        assert proc.poll() is None, log.read_text()[offset:]
        await asyncio.sleep(0.1)
    await run_traffic(gen, 2)  # new blocks arrive while the final daemon runs
    head = chain.block_number()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        try:
            conn = connect(cfg.database.target, readonly=True)
            row = conn.execute("SELECT indexed_block FROM cursor").fetchone()
            conn.close()
        except (sqlite3.OperationalError, psycopg.Error):
            continue
        if row and row[0] >= head:
            break
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0, log.read_text()[-3000:]
    assert time.monotonic() - started < 10
    if not cfg.database.url:
        assert integrity(Path(cfg.database.path)) == "ok"
    fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
    from sync_support import Harness

    killed = Harness(cfg)
    try:
        assert table_diff(killed.dump(), fresh.dump()) == ""
        assert killed.dump() == fresh.dump()
    finally:
        await killed.close()
        await fresh.close()
