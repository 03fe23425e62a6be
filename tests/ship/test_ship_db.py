"""`keeper backfill` progress and summary, and `keeper db backup` under a live writer."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ship_support import clean_env
from web3 import Web3

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import Deployment, deploy_all, send_call
from keeper.store.db import connect

KEEPER = [sys.executable, "-m", "keeper"]
TXS, JOBS_PER_TX, EVENTS_PER_JOB = 8, 10, 6  # emitJobFlowBatch with stages=3


@dataclass(frozen=True)
class Indexed:
    """A chain with a known number of escrow events and a config indexing it."""

    config: Path
    database: Path
    deployment: Deployment
    head: int
    events: int


def emit_job_flows(rpc_url: str, d: Deployment) -> int:
    """TXS blocks of full ERC-8183 job flows from the emitter; returns the events emitted."""
    w3 = Web3(Web3.HTTPProvider(rpc_url))
    emitter = w3.eth.contract(
        address=Web3.to_checksum_address(d.emitter), abi=load_abi("EventEmitter")
    )
    party = Web3.to_checksum_address("0x" + "22" * 20)
    for i in range(TXS):
        fn = emitter.functions.emitJobFlowBatch(
            1 + i * JOBS_PER_TX, JOBS_PER_TX, party, party, party, party, 10**6, 2**40, 3
        )
        send_call(w3, DEV_KEYS[0], fn)
    return TXS * JOBS_PER_TX * EVENTS_PER_JOB


def write_config(path: Path, rpc_url: str, d: Deployment, database: Path) -> Path:
    path.write_text(
        f"""[chain]
chain_id = {d.chain_id}
rpc_urls = ["{rpc_url}"]
finality = "confirmations"
confirmations = 0
max_range = 2

[database]
path = "{database}"

[[contracts]]
name = "emitter"
protocol = "erc8183"
address = "{d.emitter}"
start_block = {d.start_block}

[api]
enabled = false
"""
    )
    return path


def run_on_a_terminal(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """Run keeper with stderr on a pseudo-terminal (as an operator sees it): rc, stdout, tty."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*KEEPER, *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=clean_env(KEEPER_LOG__FORMAT="json", KEEPER_LOG__LEVEL="warning"),
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=timeout)
    reader.join(5)
    os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def chain() -> Iterator[tuple[AnvilProcess, Deployment, int]]:
    with AnvilProcess() as node:
        deployment = deploy_all(node.url)
        events = emit_job_flows(node.url, deployment)
        yield node, deployment, events


@pytest.fixture(scope="module")
def indexed(
    chain: tuple[AnvilProcess, Deployment, int], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Indexed, tuple[int, str, str]]:
    """One backfill of the whole chain, run as an operator would on a terminal."""
    node, deployment, events = chain
    tmp = tmp_path_factory.mktemp("backfill")
    database = tmp / "keeper.db"
    config = write_config(tmp / "keeper.toml", node.url, deployment, database)
    head = int(Web3(Web3.HTTPProvider(node.url)).eth.block_number)
    result = run_on_a_terminal("backfill", "--config", str(config))
    return Indexed(config, database, deployment, head, events), result


class TestBackfill:
    def test_summary_line_counts_every_event(
        self, indexed: tuple[Indexed, tuple[int, str, str]]
    ) -> None:
        """The last stdout line is a JSON summary: every emitted event, up to the head."""
        world, (code, out, tty) = indexed
        assert code == 0, tty[-3000:]
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["events"] == world.events
        assert summary["indexed_block"] == world.head
        assert summary["from_block"] <= world.deployment.start_block
        assert summary["blocks_per_second"] > 0 and summary["events_per_second"] > 0
        conn = sqlite3.connect(world.database)
        try:
            assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == world.events
        finally:
            conn.close()

    def test_progress_is_drawn_on_a_terminal(
        self, indexed: tuple[Indexed, tuple[int, str, str]]
    ) -> None:
        """On a terminal, stderr shows a redrawn line with blocks/s, events/s and an ETA."""
        world, (_, _, tty) = indexed
        lines = [part for part in tty.split("\r") if "blocks/s" in part]
        assert lines, tty[-2000:]
        assert all("events/s" in line and "ETA" in line for line in lines)
        assert f"block {world.head:,}/{world.head:,} 100.0%" in lines[-1]

    def test_no_progress_and_nothing_new(
        self, indexed: tuple[Indexed, tuple[int, str, str]]
    ) -> None:
        """A second run with --no-progress draws nothing and reports zero new events."""
        world, _ = indexed
        code, out, tty = run_on_a_terminal(
            "backfill", "--config", str(world.config), "--no-progress"
        )
        assert code == 0, tty[-2000:]
        assert "blocks/s" not in tty
        summary = json.loads(out.strip().splitlines()[-1])
        assert (summary["events"], summary["indexed_block"]) == (0, world.head)


class TestBackup:
    def test_backup_while_a_writer_commits(
        self, indexed: tuple[Indexed, tuple[int, str, str]], tmp_path: Path
    ) -> None:
        """Backups taken during a stream of commits are whole: integrity ok, no torn transaction."""
        world, _ = indexed
        batch = 50
        writer = connect(world.database)
        writer.execute("CREATE TABLE IF NOT EXISTS ship_writes (n INTEGER NOT NULL)")
        stop = threading.Event()
        commits = [0]

        def write() -> None:
            n = 0
            while not stop.is_set():
                writer.execute("BEGIN IMMEDIATE")
                writer.executemany(
                    "INSERT INTO ship_writes VALUES (?)", [(n + i,) for i in range(batch)]
                )
                writer.execute("COMMIT")
                commits[0] += 1
                n += batch

        thread = threading.Thread(target=write)
        thread.start()
        try:
            time.sleep(0.2)
            backups = []
            for i in range(3):
                target = tmp_path / "backups" / f"keeper-{i}.db"
                before = commits[0]
                result = subprocess.run(
                    [*KEEPER, "db", "backup", "--config", str(world.config), "--to", str(target)],
                    capture_output=True, text=True, timeout=60, env=clean_env(),
                )  # fmt: skip
                assert result.returncode == 0, result.stderr
                report = json.loads(result.stdout)
                assert report["backup"] == str(target) and report["bytes"] == target.stat().st_size
                # the writer kept committing while the backup ran: it never waited on a lock
                assert commits[0] > before
                backups.append(target)
        finally:
            stop.set()
            thread.join()
            writer.close()
        counts = []
        for path in backups:
            conn = sqlite3.connect(path)
            try:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == world.events
                rows = conn.execute("SELECT count(*), max(n) FROM ship_writes").fetchone()
            finally:
                conn.close()
            assert rows[0] % batch == 0 and rows[0] > 0  # whole transactions only
            assert rows[1] == rows[0] - 1  # and a prefix of them: nothing skipped
            counts.append(rows[0])
        assert counts == sorted(counts)
        assert not list((tmp_path / "backups").glob("*.partial"))

    def test_backup_refuses_to_overwrite_the_database(
        self, indexed: tuple[Indexed, tuple[int, str, str]]
    ) -> None:
        """--to naming the live database is a usage error (2), and the database is untouched."""
        world, _ = indexed
        before = world.database.stat().st_size
        result = subprocess.run(
            [*KEEPER, "db", "backup", "--config", str(world.config), "--to", str(world.database)],
            capture_output=True, text=True, timeout=60, env=clean_env(),
        )  # fmt: skip
        assert result.returncode == 2
        assert "is the database itself" in result.stderr
        assert world.database.stat().st_size == before

    def test_backup_without_a_database_is_a_failure(self, tmp_path: Path) -> None:
        """Nothing to back up exits 1 and writes no file."""
        d = Deployment(31337, *(f"0x{i:040x}" for i in range(1, 10)), start_block=0)
        config = write_config(tmp_path / "k.toml", "http://127.0.0.1:1", d, tmp_path / "none.db")
        target = tmp_path / "b.db"
        result = subprocess.run(
            [*KEEPER, "db", "backup", "--config", str(config), "--to", str(target)],
            capture_output=True, text=True, timeout=60, env=clean_env(),
        )  # fmt: skip
        assert result.returncode == 1 and "no database" in result.stderr
        assert not target.exists()
