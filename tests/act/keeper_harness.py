"""Drive a real anvil deployment for keeper tests: escrows in bulk, chain state as projections.

Setup transactions are signed locally with explicit nonces and fixed gas, so
hundreds of jobs take a second; the projections handed to the keeper are read
back from the contracts with ``getJob``/``getTask`` (the chain is the truth the
indexer would reproduce).
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_abi.abi import decode, encode
from eth_account import Account
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from keeper.act import Keeper
from keeper.devnet.anvil import DEV_KEYS, ChainControl, rpc_call
from keeper.devnet.deploy import Deployment
from keeper.domain.dialects import arg_types
from keeper.domain.model import BlockHeader, JobState, JobStatus, TaskState, TaskStatus
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig
from keeper.store.db import connect
from keeper.store.migrations import migrate

DEPLOYER = DEV_KEYS[0]
CLIENT = DEV_KEYS[1]
PROVIDER = DEV_KEYS[2]
EVALUATOR = DEV_KEYS[3]
WORKER = DEV_KEYS[5]
RESOLVER = DEV_KEYS[6]
KEEPER_KEYS = (DEV_KEYS[7], DEV_KEYS[8], DEV_KEYS[4])
SETUP_GAS = 600_000
APPEAL_WINDOW = 600


@functools.cache
def address_of(key: str) -> str:
    return str(Account.from_key(key).address).lower()


def calldata(signature: str, *args: Any) -> str:
    """ABI-encoded call of a signature such as ``fund(uint256,uint256,bytes)``."""
    types = list(arg_types(signature))
    return "0x" + (keccak(text=signature)[:4] + encode(types, list(args))).hex()


_JOB = (
    "(uint256,address,address,address,string,uint256,uint256,uint8,address,address,uint256,uint256)"
)
_TASK = "(bytes32,address,address,uint256,uint256,bytes4,uint8,bytes32,uint256,uint256,uint256)"


def open_db(path: Path) -> sqlite3.Connection:
    conn = connect(path)
    migrate(conn)
    return conn


@dataclass
class Escrows:
    """One deployment plus a fast local sender for the actors' setup transactions."""

    url: str
    d: Deployment
    control: ChainControl = field(init=False)
    _nonces: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.control = ChainControl(self.url)

    def now(self) -> int:
        return self.control.timestamp()

    def view(self, to: str, data: str) -> bytes:
        self.control.settle()  # read what automine has stored, not the block before it
        return bytes.fromhex(
            str(rpc_call(self.url, "eth_call", [{"to": to, "data": data}, "latest"]))[2:]
        )

    def send(self, key: str, to: str, data: str) -> str:
        """Sign and send with a locally tracked nonce and a generous fixed fee."""
        sender = address_of(key)
        if sender not in self._nonces:
            count = rpc_call(self.url, "eth_getTransactionCount", [sender, "pending"])
            self._nonces[sender] = int(count, 16)
        tx = {
            "type": 2,
            "chainId": 31337,
            "nonce": self._nonces[sender],
            "to": to_checksum_address(to),
            "data": data,
            "value": 0,
            "gas": SETUP_GAS,
            "maxFeePerGas": 50 * 10**9,
            "maxPriorityFeePerGas": 10**9,
        }
        signed = Account.sign_transaction(tx, key)
        self._nonces[sender] += 1
        raw = "0x" + signed.raw_transaction.hex()
        return str(rpc_call(self.url, "eth_sendRawTransaction", [raw]))

    def send_with_nonce(self, key: str, to: str, data: str, nonce: int, max_fee: int) -> str:
        """A raw transaction at an explicit nonce (for a key also used by a keeper)."""
        tx = {
            "type": 2,
            "chainId": 31337,
            "nonce": nonce,
            "to": to_checksum_address(to),
            "data": data,
            "value": 0,
            "gas": 21_000,
            "maxFeePerGas": max_fee,
            "maxPriorityFeePerGas": max_fee,
        }
        raw = "0x" + Account.sign_transaction(tx, key).raw_transaction.hex()
        return str(rpc_call(self.url, "eth_sendRawTransaction", [raw]))

    def wait(self, tx_hashes: list[str]) -> None:
        """Require every setup transaction to be mined successfully."""
        for tx_hash in tx_hashes:
            receipt = None
            for _ in range(500):
                receipt = rpc_call(self.url, "eth_getTransactionReceipt", [tx_hash])
                if receipt is not None:
                    break
                time.sleep(0.01)
            assert receipt is not None and receipt["status"] == "0x1", f"setup failed: {receipt}"

    def call(self, key: str, to: str, signature: str, *args: Any) -> str:
        tx_hash = self.send(key, to, calldata(signature, *args))
        self.wait([tx_hash])
        return tx_hash

    def bulk(self, sends: list[tuple[str, str, str]]) -> None:
        """Send many (key, to, calldata) into one block with automine paused, then check them."""
        self.control.set_automine(False)
        try:
            hashes = [self.send(key, to, data) for key, to, data in sends]
            self.control.mine()
        finally:
            self.control.set_automine(True)
        self.wait(hashes)

    # ----- ERC-8183 jobs -----

    def funded_jobs(
        self, n: int, expired_at: int, budget: int = 10**6, *, escrow: str | None = None
    ) -> list[str]:
        """``n`` Funded jobs sharing one deadline, on the AgenticCommerce escrow (or one at
        ``escrow`` that answers as it); returns their ids (decimal strings)."""
        c, usdc = escrow or self.d.commerce, self.d.usdc
        self.call(DEPLOYER, usdc, "mint(address,uint256)", address_of(CLIENT), budget * n)
        self.call(CLIENT, usdc, "approve(address,uint256)", c, budget * n)
        (counter,) = decode(["uint256"], self.view(c, calldata("jobCounter()")))
        ids = [str(counter + 1 + i) for i in range(n)]
        create = calldata(
            "createJob(address,address,uint256,string,address,uint256)",
            address_of(PROVIDER),
            address_of(EVALUATOR),
            expired_at,
            "keeper test",
            "0x" + "00" * 20,
            0,
        )
        for start in range(0, n, 200):  # 200 jobs x 3 calls stays well under the block gas
            sends: list[tuple[str, str, str]] = []
            for job_id in ids[start : start + 200]:
                j = int(job_id)
                sends += [
                    (CLIENT, c, create),
                    (
                        CLIENT,
                        c,
                        calldata("setBudget(uint256,address,uint256,bytes)", j, usdc, budget, b""),
                    ),
                    (CLIENT, c, calldata("fund(uint256,uint256,bytes)", j, budget, b"")),
                ]
            self.bulk(sends)
        return ids

    def expired_jobs(self, n: int, after: int = 100, *, escrow: str | None = None) -> list[str]:
        """``n`` Funded jobs expiring ``after`` seconds from now, the chain mined to that
        deadline: due for claimRefund on the next head."""
        expiry = self.now() + after
        ids = self.funded_jobs(n, expiry, escrow=escrow)
        self.control.mine_at(expiry)
        return ids

    def submit(self, job_id: str) -> int:
        """The provider submits a deliverable; returns the block timestamp of the submission."""
        sig = "submit(uint256,bytes32,bytes)"
        self.call(PROVIDER, self.d.commerce, sig, int(job_id), b"\x33" * 32, b"")
        return self.now()

    def jobs(self, ids: list[str], *, escrow: str | None = None) -> list[JobState]:
        """Projections of the given jobs, read from the contract (AgenticCommerce, or
        ``escrow``) at latest."""
        c = escrow or self.d.commerce
        out = []
        for job_id in ids:
            raw = self.view(c, calldata("getJob(uint256)", int(job_id)))
            (j,) = decode([_JOB], raw)
            out.append(
                JobState(
                    contract=c,
                    job_id=job_id,
                    client=j[1].lower(),
                    provider=j[2].lower(),
                    evaluator=j[3].lower(),
                    budget=int(j[5]),
                    expired_at=int(j[6]),
                    status=JobStatus(int(j[7])),
                    submitted_at=int(j[11]) or None,
                )
            )
        return out

    # ----- task market -----

    def review_task(self, tm: str, task_id: str, expiry: int, window: int) -> int:
        """A task with an evaluator, claimed and submitted; returns its evaluation deadline."""
        reward = 5 * 10**6
        tid = bytes.fromhex(task_id[2:])
        self.call(DEPLOYER, self.d.usdc, "mint(address,uint256)", address_of(CLIENT), reward)
        self.call(CLIENT, self.d.usdc, "approve(address,uint256)", tm, reward)
        self.call(
            CLIENT, tm, "createTask(bytes32,uint256,uint256,bytes4)", tid, reward, expiry, b"\0" * 4
        )
        self.call(
            CLIENT,
            tm,
            "assignEvaluator(bytes32,address,uint256,uint16,uint32,uint32,address)",
            tid,
            address_of(EVALUATOR),
            0,
            100,
            window,
            APPEAL_WINDOW,
            address_of(RESOLVER),
        )
        self.call(WORKER, tm, "claimTask(bytes32)", tid)
        self.call(WORKER, tm, "submitWork(bytes32,bytes32)", tid, b"\x11" * 32)
        return self.now() + window

    def appealing_task(self, tm: str, task_id: str) -> int:
        """A task evaluated APPROVE with one award; returns its appeal deadline."""
        self.review_task(tm, task_id, self.now() + 50, window=300)
        self.call(
            EVALUATOR,
            tm,
            "evaluate(bytes32,uint8,uint16,uint16,bytes32,(address,uint256,uint16)[])",
            bytes.fromhex(task_id[2:]),
            0,
            90,
            80,
            b"\x22" * 32,
            [(address_of(WORKER), 4 * 10**6, 1)],
        )
        return self.now() + APPEAL_WINDOW

    def open_task(self, tm: str, task_id: str, expiry: int) -> None:
        """A task created and never claimed."""
        reward = 10**6
        self.call(DEPLOYER, self.d.usdc, "mint(address,uint256)", address_of(CLIENT), reward)
        self.call(CLIENT, self.d.usdc, "approve(address,uint256)", tm, reward)
        tid = bytes.fromhex(task_id[2:])
        self.call(
            CLIENT, tm, "createTask(bytes32,uint256,uint256,bytes4)", tid, reward, expiry, b"\0" * 4
        )

    def open_job_with_budget(self, expired_at: int, budget: int) -> str:
        """A job whose budget is set but never funded (the claimRefund hazard)."""
        c = self.d.commerce
        (counter,) = decode(["uint256"], self.view(c, calldata("jobCounter()")))
        self.call(
            CLIENT,
            c,
            "createJob(address,address,uint256,string,address,uint256)",
            address_of(PROVIDER),
            address_of(EVALUATOR),
            expired_at,
            "unfunded",
            "0x" + "00" * 20,
            0,
        )
        sig = "setBudget(uint256,address,uint256,bytes)"
        self.call(CLIENT, c, sig, counter + 1, self.d.usdc, budget, b"")
        return str(counter + 1)

    def task(
        self,
        tm: str,
        task_id: str,
        evaluation_deadline: int | None = None,
        appeal_deadline: int | None = None,
    ) -> TaskState:
        """Projection of one task, read at latest; the deadline comes from the caller."""
        raw = self.view(tm, calldata("getTask(bytes32)", bytes.fromhex(task_id[2:])))
        (t,) = decode([_TASK], raw)
        return TaskState(
            contract=tm,
            task_id=task_id,
            requester=t[1].lower(),
            reward=int(t[3]),
            expiry_time=int(t[4]),
            status=TaskStatus(int(t[6])),
            evaluation_deadline=evaluation_deadline,
            appeal_deadline=appeal_deadline,
        )


MakeKeeper = Callable[..., Keeper]


def make_rpc(url: str, *, attempts: int = 3) -> RpcClient:
    """A real client: generous throttle, short retries so a fault surfaces quickly."""
    endpoint = EndpointConfig.from_url(url, name="node", rate=10_000)
    return RpcClient(
        [endpoint], timeout=3.0, max_attempts=attempts, deadline=10.0, retry_initial=0.01
    )


async def head(rpc: RpcClient) -> BlockHeader:
    """The node's latest header (the head a keeper ticks on)."""
    block = await rpc.get_block("latest")
    assert block is not None
    return block


def nonce_of(escrows: Escrows, key: str, tag: str = "latest") -> int:
    """The transaction count of ``key``'s address at ``tag``."""
    escrows.control.settle()
    return int(escrows.control.call("eth_getTransactionCount", address_of(key), tag), 16)


async def run(
    keeper: Keeper, escrows: Escrows, rpc: RpcClient, ids: list[str], ticks: int = 1
) -> None:
    """Tick the keeper ``ticks`` times on fresh heads, mining one block between ticks."""
    for i in range(ticks):
        if i:
            escrows.control.mine()
        await keeper.tick(await head(rpc), escrows.jobs(ids), [])
