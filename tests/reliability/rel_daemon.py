"""``python -m keeper run`` as a child process with the keeper enabled, for torture tests.

The daemon reads the lead's indexer config (``sync_support.write_config``) and
gets everything else from ``KEEPER_*`` overrides: the API on a free port (for
/readyz and /v1/status) and the keeper with its key in ``$KEEPER_PRIVATE_KEY``,
which is how an operator would run it in a container.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from keeper.devnet.anvil import free_port
from keeper.devnet.deploy import Deployment
from keeper.devnet.evaluator_service import VerdictBook, load_fixtures
from keeper.devnet.traffic import KEEPER_KEY, Timing, TrafficGenerator

__all__ = ["DaemonProc", "keeper_env", "keeper_traffic"]

KEEPER = [sys.executable, "-m", "keeper"]


def keeper_env(port: int, key: str = KEEPER_KEY, **extra: str) -> dict[str, str]:
    """Overrides that turn the indexer-only config into a full daemon with a keeper and API."""
    return {
        "KEEPER_API__ENABLED": "true",
        "KEEPER_API__LISTEN": f"127.0.0.1:{port}",
        "KEEPER_KEEPER__ENABLED": "true",
        "KEEPER_KEEPER__PRIVATE_KEY_ENV": "KEEPER_PRIVATE_KEY",
        "KEEPER_PRIVATE_KEY": key,
        # one block on top is enough on a devnet whose reorgs the test makes itself
        "KEEPER_KEEPER__CONFIRMATIONS": "1",
        "KEEPER_LOG__FORMAT": "json",
        **extra,
    }


def keeper_traffic(rpc_url: str, deployment: Deployment, interval: float = 0.3) -> TrafficGenerator:
    """Devnet traffic that leaves every keeper action to the daemon.

    Two minutes of chain time per step: job and task deadlines fall due within
    a few steps, so kills and reorgs land while the keeper has work.
    """
    return TrafficGenerator(
        rpc_url,
        deployment,
        VerdictBook(deployment.commerce),
        load_fixtures(),
        self_keep=False,
        timing=Timing(interval=interval, warp=120),
    )


class DaemonProc:
    """One daemon config, started and killed many times; output appends to one log file."""

    def __init__(self, config_file: Path, log: Path, env: dict[str, str], port: int) -> None:
        self.config_file = config_file
        self.log = log
        self.env = {**os.environ, **env}
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.log_offset = 0

    @classmethod
    def for_config(
        cls, config_file: Path, log: Path, key: str = KEEPER_KEY, **extra: str
    ) -> DaemonProc:
        port = free_port()
        return cls(config_file, log, keeper_env(port, key, **extra), port)

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*KEEPER, "run", "--config", str(self.config_file)],
                stdout=out,
                stderr=out,
                env=self.env,
            )
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM and the exit code (the daemon promises 0 within its grace period)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def output(self, *, since_start: bool = False) -> str:
        data = self.log.read_bytes() if self.log.exists() else b""
        return data[self.log_offset if since_start else 0 :].decode(errors="replace")

    def tail(self, chars: int = 3000) -> str:
        return self.output()[-chars:]

    # --- HTTP ---------------------------------------------------------------------------

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes] | None:
        """One GET on the daemon's API; None while nothing listens."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    async def aget(self, path: str, limit: float = 5.0) -> tuple[int, bytes] | None:
        return await asyncio.to_thread(self.get, path, limit)

    async def status(self) -> dict[str, Any] | None:
        reply = await self.aget("/v1/status")
        if reply is None or reply[0] != 200:
            return None
        data: dict[str, Any] = json.loads(reply[1])
        return data

    async def wait_ready(self, within: float, min_indexed: int = -1) -> float | None:
        """Seconds from start to /readyz 200 with the cursor at ``min_indexed`` or beyond.

        None when the process died or the time ran out (the caller shows the log).
        """
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if not self.alive():
                return None
            ready = await self.aget("/readyz", limit=2)
            if ready is not None and ready[0] == 200:
                status = await self.status()
                indexed = None if status is None else status.get("indexed_block")
                if indexed is not None and indexed >= min_indexed:
                    return time.monotonic() - self.started_at
            await asyncio.sleep(0.05)
        return None

    async def wait_indexed(self, block: int, within: float) -> bool:
        """Whether the cursor reached ``block`` while the process stayed up."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and self.alive():
            status = await self.status()
            if status is not None and (status.get("indexed_block") or -1) >= block:
                return True
            await asyncio.sleep(0.1)
        return False
