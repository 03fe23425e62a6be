"""SIGTERM while a keeper transaction is in flight: persisted, exit 0 in time, never re-sent.

The whole daemon (`python -m keeper run`) runs against anvil behind a proxy
that forwards the keeper's `eth_sendRawTransaction` to the node and then holds
the reply: the transaction is in the node's pool while the daemon is still
inside its send. Automine is off, so it stays pending across the restart.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from act.keeper_harness import KEEPER_KEYS, Escrows, address_of
from ship_support import EXPIRED, KEY_ENV, clean_env, free_port, keeper_toml, wait_for
from support.rpc_proxy import RpcProxy

from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all

# the container's stop grace period (docker's default is 10 s)
GRACE_SECONDS = 10.0


def rows(database: Path, sql: str) -> list[tuple[Any, ...]]:
    """A read of the daemon's database from outside (WAL: never blocks the daemon)."""
    if not database.exists():
        return []
    conn = sqlite3.connect(database)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        conn.close()


class Daemon:
    """`keeper run` as a child process with its log in a file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "keeper", "run", "--config", str(config)],
                stdout=out,
                stderr=out,
                env=clean_env(**{KEY_ENV: KEEPER_KEYS[0], "KEEPER_LOG__FORMAT": "json"}),
            )

    def alive(self) -> bool:
        assert self.proc.poll() is None, self.tail()
        return True

    def tail(self) -> str:
        return self.log.read_text()[-4000:]

    def terminate(self) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds until exit)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def escrows() -> Iterator[Escrows]:
    with AnvilProcess() as node:
        yield Escrows(node.url, deploy_all(node.url))


def test_sigterm_mid_send_persists_and_restart_does_not_resend(
    escrows: Escrows, tmp_path: Path
) -> None:
    """SIGTERM during a held send exits 0 in time; the restarted daemon confirms that same tx."""
    expiry = escrows.now() + 100
    (job_id,) = escrows.funded_jobs(1, expiry)
    escrows.control.mine_at(expiry)  # the job is now refundable by anyone
    escrows.control.set_automine(False)
    database = tmp_path / "keeper.db"
    log = tmp_path / "daemon.log"
    with RpcProxy(escrows.url) as proxy:
        config = keeper_toml(
            tmp_path / "keeper.toml",
            proxy.url,
            escrows.d.commerce,
            escrows.d.start_block,
            str(database),
        )
        proxy.rules.on("eth_sendRawTransaction", drop_reply=1, drop_mode="timeout", delay=120)

        first = Daemon(config, log)
        try:
            wait_for(
                lambda: first.alive() and proxy.requests_for("eth_sendRawTransaction"),
                60,
                "the keeper to broadcast claimRefund",
            )
            [(signed_raw,)] = proxy.requests_for("eth_sendRawTransaction")
            [(tx_hash, _, raw)] = rows(
                database, "SELECT tx_hash, status, raw_tx FROM keeper_attempts"
            )
            assert raw == signed_raw  # written before it was broadcast
            assert escrows.control.call("eth_getTransactionByHash", tx_hash) is not None
            code, seconds = first.terminate()
        finally:
            first.kill()
        assert code == 0, first.tail()
        assert seconds < GRACE_SECONDS, f"took {seconds:.1f}s to stop"
        assert "daemon_stopped" in first.log.read_text()
        assert rows(database, "PRAGMA integrity_check") == [("ok",)]
        [(persisted_hash, persisted_status)] = rows(
            database, "SELECT tx_hash, status FROM keeper_attempts"
        )
        assert persisted_hash == tx_hash and persisted_status in ("signed", "sent")
        assert rows(database, "SELECT status FROM keeper_intents") == [("inflight",)]

        proxy.rules.clear()
        sent_before = len(proxy.requests_for("eth_sendRawTransaction"))
        second = Daemon(config, log)
        try:
            wait_for(
                lambda: (
                    second.alive()
                    and "daemon_started" in log.read_text().split("daemon_stopped")[-1]
                ),
                60,
                "the daemon to start again",
            )
            escrows.control.mine()  # the pending claimRefund is included
            escrows.control.mine()  # and confirmed (keeper.confirmations = 1)

            def confirmed() -> bool:
                second.alive()
                got = rows(database, "SELECT status, outcome, tx_hash FROM keeper_intents")
                return got == [("done", "confirmed", tx_hash)]

            wait_for(confirmed, 60, "the restarted keeper to confirm the original transaction")
            code, seconds = second.terminate()
        finally:
            second.kill()
        assert code == 0, second.tail()
        assert seconds < GRACE_SECONDS
        resent = proxy.requests_for("eth_sendRawTransaction")[sent_before:]
        assert all(params == [signed_raw] for params in resent)  # same bytes if any

    assert rows(database, "SELECT tx_hash FROM keeper_attempts") == [(tx_hash,)]
    [job] = escrows.jobs([job_id])
    assert int(job.status) == EXPIRED
    nonce = escrows.control.call("eth_getTransactionCount", address_of(KEEPER_KEYS[0]), "latest")
    assert int(nonce, 16) == 1  # one transaction ever mined from the keeper
    receipt = escrows.control.call("eth_getTransactionReceipt", tx_hash)
    assert receipt is not None and receipt["status"] == "0x1"
    assert json.loads(json.dumps(receipt))["to"] == escrows.d.commerce


def test_devnet_duration_stops_the_daemon_before_closing_it(tmp_path: Path) -> None:
    """`keeper devnet --duration` cancels the daemon: its loops end before its connections close."""
    with AnvilProcess() as node:
        env = clean_env(
            KEEPER_API__LISTEN=f"127.0.0.1:{free_port()}",
            KEEPER_LOG__FORMAT="json",
            KEEPER_CHAIN__POLL_INTERVAL="0.05",
        )
        argv = ["devnet", "--rpc", node.url, "--workdir", str(tmp_path), "--duration", "6"]
        result = subprocess.run(
            [sys.executable, "-m", "keeper", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    (started,) = [json.loads(x) for x in result.stderr.splitlines() if "daemon_started" in x]
    assert started["native_log_scan"] is True  # said, so an operator sees a build without it
    for line in result.stderr.splitlines():
        assert "never retrieved" not in line and "Session is closed" not in line, line
        assert '"level": "error"' not in line, line
