"""Drive a real anvil deployment for keeper tests: escrows in bulk, chain state as projections.

Setup transactions are signed locally with explicit nonces and fixed gas, so
hundreds of jobs take a second; the projections handed to the keeper are read
back from the contracts with ``getJob``/``getTask`` (the chain is the truth the
indexer would reproduce).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_account import Account
from web3 import Web3
from web3.contract import Contract

from keeper.devnet.anvil import DEV_KEYS, ChainControl, rpc_call
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import Deployment
from keeper.domain.model import JobState, JobStatus, TaskState, TaskStatus
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


def address_of(key: str) -> str:
    return str(Account.from_key(key).address)


def open_db(path: Path) -> sqlite3.Connection:
    conn = connect(path)
    migrate(conn)
    return conn


@dataclass
class Escrows:
    """One deployment plus a fast local sender for the actors' setup transactions."""

    url: str
    d: Deployment
    w3: Web3 = field(init=False)
    control: ChainControl = field(init=False)
    _nonces: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.w3 = Web3(Web3.HTTPProvider(self.url))
        self.control = ChainControl(self.url)
        self.usdc = self.contract("MockUSDC", self.d.usdc)
        self.commerce = self.contract("AgenticCommerce", self.d.commerce)
        self.tm = self.contract("TaskMarket", self.d.taskmarket)
        self.tm_strict = self.contract("TaskMarket", self.d.taskmarket_strict)

    def contract(self, name: str, address: str) -> Contract:
        return self.w3.eth.contract(address=Web3.to_checksum_address(address), abi=load_abi(name))

    def now(self) -> int:
        return self.control.timestamp()

    def send(self, key: str, to: str, data: str) -> str:
        """Sign and send with a locally tracked nonce; anvil automines it immediately."""
        sender = address_of(key)
        if sender not in self._nonces:
            self._nonces[sender] = int(
                rpc_call(self.url, "eth_getTransactionCount", [sender, "pending"]), 16
            )
        base = int(self.control.block()["baseFeePerGas"], 16)
        tx = {
            "type": 2,
            "chainId": 31337,
            "nonce": self._nonces[sender],
            "to": Web3.to_checksum_address(to),
            "data": data,
            "value": 0,
            "gas": SETUP_GAS,
            "maxFeePerGas": 4 * base + 10**9,
            "maxPriorityFeePerGas": 10**9,
        }
        signed = Account.sign_transaction(tx, key)
        self._nonces[sender] += 1
        return str(
            rpc_call(self.url, "eth_sendRawTransaction", ["0x" + signed.raw_transaction.hex()])
        )

    def call(self, key: str, contract: Contract, fn: str, *args: Any) -> str:
        data = contract.encode_abi(fn, args=list(args))
        tx_hash = self.send(key, contract.address, data)
        receipt = None
        for _ in range(200):
            receipt = rpc_call(self.url, "eth_getTransactionReceipt", [tx_hash])
            if receipt is not None:
                break
            time.sleep(0.01)
        assert receipt is not None and receipt["status"] == "0x1", f"{fn} failed: {receipt}"
        return tx_hash

    # ----- ERC-8183 jobs -----

    def funded_jobs(self, n: int, expired_at: int, budget: int = 10**6) -> list[str]:
        """``n`` Funded jobs sharing one deadline; returns their ids (decimal strings)."""
        client = address_of(CLIENT)
        self.call(DEPLOYER, self.usdc, "mint", client, budget * n)
        self.call(CLIENT, self.usdc, "approve", self.commerce.address, budget * n)
        first = int(self.commerce.functions.jobCounter().call()) + 1
        ids = [str(first + i) for i in range(n)]
        for job_id in ids:
            self.call(
                CLIENT,
                self.commerce,
                "createJob",
                address_of(PROVIDER),
                address_of(EVALUATOR),
                expired_at,
                "keeper test",
                "0x" + "00" * 20,
                0,
            )
            self.call(
                CLIENT, self.commerce, "setBudget", int(job_id), self.usdc.address, budget, b""
            )
            self.call(CLIENT, self.commerce, "fund", int(job_id), budget, b"")
        return ids

    def jobs(self, ids: list[str]) -> list[JobState]:
        """Projections of the given jobs, read from the contract at latest."""
        out = []
        for job_id in ids:
            j = self.commerce.functions.getJob(int(job_id)).call()
            out.append(
                JobState(
                    contract=self.d.commerce,
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

    def review_task(self, tm: Contract, task_id: str, expiry: int, window: int) -> int:
        """A task with an evaluator, submitted; returns the evaluation deadline."""
        reward = 5 * 10**6
        requester = address_of(CLIENT)
        self.call(DEPLOYER, self.usdc, "mint", requester, reward)
        self.call(CLIENT, self.usdc, "approve", tm.address, reward)
        self.call(CLIENT, tm, "createTask", bytes.fromhex(task_id[2:]), reward, expiry, b"\x00" * 4)
        self.call(
            CLIENT,
            tm,
            "assignEvaluator",
            bytes.fromhex(task_id[2:]),
            address_of(EVALUATOR),
            0,
            100,
            window,
            600,
            address_of(RESOLVER),
        )
        self.call(WORKER, tm, "claimTask", bytes.fromhex(task_id[2:]))
        self.call(WORKER, tm, "submitWork", bytes.fromhex(task_id[2:]), b"\x11" * 32)
        return int(self.now()) + window

    def task(self, tm: Contract, task_id: str, evaluation_deadline: int | None) -> TaskState:
        t = tm.functions.getTask(bytes.fromhex(task_id[2:])).call()
        return TaskState(
            contract=tm.address.lower(),
            task_id=task_id,
            requester=t[1].lower(),
            reward=int(t[3]),
            expiry_time=int(t[4]),
            status=TaskStatus(int(t[6])),
            evaluation_deadline=evaluation_deadline,
        )
