"""Run a real anvil node as a child process, and drive it.

The node comes from the npm package ``@foundry-rs/anvil`` installed in the
project's ``node_modules``. The process is always reaped: ``stop`` kills the
whole process group, and ``AnvilProcess`` is a context manager so a failing
test cannot leak it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

# anvil's well-known dev mnemonic accounts (public test keys, never real funds)
DEV_KEYS: tuple[str, ...] = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def find_anvil() -> str:
    """Locate the anvil binary: $ANVIL_BIN, the npm package's native binary, then PATH."""
    env = os.environ.get("ANVIL_BIN")
    if env:
        return env
    for base in (Path.cwd(), PROJECT_ROOT):
        for native in sorted((base / "node_modules" / "@foundry-rs").glob("anvil-*/bin/anvil")):
            if os.access(native, os.X_OK):
                return str(native)
    found = shutil.which("anvil")
    if found:
        return found
    raise FileNotFoundError(
        "anvil not found: run `npm ci` in the project root (package @foundry-rs/anvil)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RpcError(Exception):
    def __init__(self, error: Any) -> None:
        super().__init__(str(error))
        self.error = error


def rpc_call(url: str, method: str, params: list[Any] | None = None, timeout: float = 30) -> Any:
    """A blocking JSON-RPC call for harness code (tests, devnet setup)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []})
    req = urllib.request.Request(
        url, data=body.encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        reply = json.loads(resp.read())
    if "error" in reply:
        raise RpcError(reply["error"])
    return reply["result"]


class AnvilProcess:
    """A private anvil node on a free loopback port.

    ``slots_in_an_epoch`` controls anvil's ``finalized`` tag (head minus two
    epochs), so tests can exercise the finalized/unfinalized split cheaply.
    """

    def __init__(
        self,
        *,
        chain_id: int = 31337,
        port: int | None = None,
        block_time: float | None = None,
        slots_in_an_epoch: int = 4,
        extra_args: list[str] | None = None,
        state_path: Path | None = None,
    ) -> None:
        self.chain_id = chain_id
        self.port = port or free_port()
        self.block_time = block_time
        self.slots_in_an_epoch = slots_in_an_epoch
        self.extra_args = extra_args or []
        self.state_path = state_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # what the node is called in errors, and the directory it runs in (a benchmark runs
    # another node through this class: bench/hardhat_node.py)
    name = "anvil"
    cwd: Path | None = None

    def command(self) -> list[str]:
        """The node's command line."""
        args = [
            find_anvil(),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--chain-id",
            str(self.chain_id),
            "--slots-in-an-epoch",
            str(self.slots_in_an_epoch),
            "--accounts",
            str(len(DEV_KEYS)),
            "--code-size-limit",
            "100000",
            "--gas-limit",
            "300000000",
            *self.extra_args,
        ]
        if self.block_time is not None:
            args += ["--block-time", str(self.block_time)]
        if self.state_path is not None:
            args += ["--state", str(self.state_path)]
        return args

    def start(self, timeout: float = 20.0) -> AnvilProcess:
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # own process group: stop() kills it whole
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {err[-2000:]}")
            try:
                rpc_call(self.url, "eth_chainId", timeout=1)
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"{self.name} did not answer on {self.url} within {timeout}s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        if proc.stderr:
            proc.stderr.close()

    def __enter__(self) -> AnvilProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ChainControl:
    """The test-and-devnet levers on an anvil node: time, mining, reorgs, fees.

    Every lever that moves the chain first lets automine finish: anvil answers
    ``eth_sendRawTransaction`` before its miner has stored the block, and a
    reorg, a mined block or a new timestamp racing that miner leaves anvil's
    books inconsistent (a receipt in a canonical block whose sender's count
    never counted it) or takes the timestamp the caller meant for its own block.
    """

    # automine stores a block in milliseconds; a pool that has not moved for this
    # long holds transactions it will not mine (fees under the base fee)
    SETTLE_STALL_SECONDS = 1.0

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, *params: Any) -> Any:
        return rpc_call(self.url, method, list(params))

    def settle(self) -> None:
        """Return once automine has stored every transaction it holds ready to mine."""
        ready = self._ready()
        if not ready or not self.call("anvil_getAutomine"):
            return
        moved_at = time.monotonic()
        while ready:
            time.sleep(0.002)
            now = self._ready()
            if now != ready:
                ready, moved_at = now, time.monotonic()
            elif time.monotonic() - moved_at > self.SETTLE_STALL_SECONDS:
                return

    def _ready(self) -> int:
        return int(self.call("txpool_status")["pending"], 16)

    def block_number(self) -> int:
        return int(self.call("eth_blockNumber"), 16)

    def block(self, tag: int | str = "latest") -> dict[str, Any]:
        ref = hex(tag) if isinstance(tag, int) else tag
        result: dict[str, Any] = self.call("eth_getBlockByNumber", ref, False)
        return result

    def timestamp(self, tag: int | str = "latest") -> int:
        return int(self.block(tag)["timestamp"], 16)

    def mine(self, blocks: int = 1) -> None:
        self.settle()
        self.call("anvil_mine", hex(blocks))

    def increase_time(self, seconds: int, *, mine: bool = True) -> None:
        self.settle()
        self.call("evm_increaseTime", seconds)
        if mine:
            self.mine()

    def set_next_timestamp(self, ts: int) -> None:
        self.settle()
        self.call("evm_setNextBlockTimestamp", ts)

    def mine_at(self, ts: int) -> None:
        """Mine one block whose timestamp is exactly ``ts``."""
        self.set_next_timestamp(ts)
        self.mine()

    def snapshot(self) -> str:
        self.settle()
        return str(self.call("evm_snapshot"))

    def revert(self, snapshot_id: str) -> bool:
        self.settle()
        return bool(self.call("evm_revert", snapshot_id))

    def reorg(self, depth: int, txs: list[tuple[dict[str, Any] | str, int]] | None = None) -> None:
        """Replace the last ``depth`` blocks (anvil_reorg); ``txs`` (requests from unlocked
        accounts, or signed raw transactions as hex) go into the new ones, by block index."""
        self.settle()
        self.call("anvil_reorg", depth, [[tx, idx] for tx, idx in (txs or [])])

    def set_base_fee(self, wei: int) -> None:
        self.settle()
        self.call("anvil_setNextBlockBaseFeePerGas", hex(wei))

    def drop_transaction(self, tx_hash: str) -> None:
        self.call("anvil_dropTransaction", tx_hash)

    def set_automine(self, enabled: bool) -> None:
        self.call("evm_setAutomine", enabled)

    def set_balance(self, address: str, wei: int) -> None:
        self.call("anvil_setBalance", address, hex(wei))
