"""Benchmark traffic through the devnet's ERC8183-shaped escrow, as real jobs would make it.

``contracts/BulkJobDriver.sol`` is the client of every job; its provider and
evaluator are two contracts of its own (the escrow wants three distinct
addresses). Each driver transaction is one *wave*: it creates ``jobs_per_tx``
jobs with their descriptions and moves the four previous waves one stage on
(setBudget, fund, submit, complete), so a job's lifecycle spans five
transactions and, in the sparse workload, five blocks: the indexer meets jobs
whose events fall in different batches, as on a real chain. Every log comes
from the escrow's address and every ``getJob`` the indexer makes answers the
upstream struct with the job's real description.

Eight escrow events per job: JobCreated, BudgetSet, JobFunded, JobSubmitted,
PlatformFeePaid, EvaluatorFeePaid, PaymentReleased, JobCompleted.

Dense blocks hold several transactions: under Osaka one transaction may use
at most 2**24 gas (EIP-7825, enforced here with anvil's
``--enable-tx-gas-limit``), so thousands of events a block take several
transactions, mined together with automine off and ``evm_mine``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from web3 import Web3

from bench.common import Sender, calldata
from keeper.devnet.anvil import DEV_KEYS, rpc_call
from keeper.devnet.deploy import Deployment, connect, deploy_contract
from keeper.domain.multicall import MULTICALL3_ADDRESS

EVENTS_PER_JOB = 8
STAGES = 5  # create, setBudget, fund, submit, complete: one wave per transaction each
TX_GAS_CAP = 2**24  # EIP-7825
# what an anvil serving the benchmark runs with, beside bench.common.ARCHIVE_ANVIL (the
# devnet's AnvilProcess already allows 300M gas a block: room for DENSE's transactions)
ANVIL_ARGS = ["--enable-tx-gas-limit"]
_STEP_SIG = "step(string[],uint256[],uint256[],uint256[],uint256[])"
_STEP_TYPES = ["string[]", "uint256[]", "uint256[]", "uint256[]", "uint256[]"]
_RECEIPTS_AT_ONCE = 200

_BRIEFS = (
    "Translate the product listing into Italian",
    "Summarise the quarterly supplier report",
    "Extract every VAT number from the invoices",
    "Write unit tests for the CSV parser",
    "Label the street-sign photos",
    "Fix the flaky integration test",
    "Review the lease contract for renewal terms",
    "Draft release notes from the merged pull requests",
)
_FIELDS = ("name", "vat", "country", "total", "currency", "due")


def description(job_id: int) -> str:
    """A realistic SchemaEval-style description (40-160 bytes), a function of the job id.

    The benchmark recomputes it to check that the backfill stored every job's real
    description, not a dropped or failed read.
    """
    doc: dict[str, Any] = {"brief": f"{_BRIEFS[job_id % len(_BRIEFS)]} (batch {job_id})"}
    shape = job_id % 3
    if shape == 1:
        doc["schema"] = {"type": "object"}
    elif shape == 2:
        required = list(_FIELDS[: 1 + job_id % 4])
        doc["schema"] = {"type": "object", "required": required}
    return json.dumps(doc, separators=(",", ":"))


@dataclass(frozen=True)
class Density:
    """How the waves sit in blocks."""

    name: str
    jobs_per_tx: int
    txs_per_block: int

    @property
    def events_per_block(self) -> int:
        return EVENTS_PER_JOB * self.jobs_per_tx * self.txs_per_block

    @property
    def gas_per_tx(self) -> int:
        """The gas each transaction may use: a job of a steady wave needs about 450k before
        the storage refunds (a stage on jobs of an earlier transaction touches cold storage)."""
        gas = 300_000 + 450_000 * self.jobs_per_tx
        if gas > TX_GAS_CAP:
            raise ValueError(f"{self.jobs_per_tx} jobs a transaction need more than 2**24 gas")
        return gas

    @property
    def max_range(self) -> int:
        """Blocks per eth_getLogs: about LOGS_PER_RANGE logs an answer."""
        return max(1, LOGS_PER_RANGE // self.events_per_block)


# under the 10,000-20,000-log caps hosted providers put on one getLogs answer
LOGS_PER_RANGE = 12_288
# 32 jobs x 8 events = 256 events and about 11.6M gas used (14.7M before refunds, under
# 2**24) a transaction; 12 transactions = 3,072 events and about 138M gas a block
DENSE = Density("dense", jobs_per_tx=32, txs_per_block=12)
# anvil (1.7.1) spends time and memory on every block in proportion to the whole state
# (here, with 5,000 jobs stored: 430 ms and 8 MB an empty block, prune-history or not), so
# a chain with many blocks must hold few jobs: the sparse workload puts its events in
# SPARSE_BLOCKS blocks, one wave each, and is smaller than the dense one (bench/README.md;
# bench/chain_cost.py measures what larger sparse chains take to build)
SPARSE_BLOCKS = 1_250


# the quick sparse workload's density whatever the size (2 jobs, 16 events a block): on a
# node whose cost per block follows the block's own changes (bench/hardhat_node.py), a
# larger sparse chain is more such blocks, not fuller ones
SPARSE_WIDE = Density("sparse", jobs_per_tx=2, txs_per_block=1)


def sparse(events: int) -> Density:
    """One transaction a block, as many jobs each as puts ``events`` in SPARSE_BLOCKS blocks
    (2 jobs, 16 events a block, for 20,000 events)."""
    return Density("sparse", jobs_per_tx=max(1, -(-events // (EVENTS_PER_JOB * SPARSE_BLOCKS))),
                   txs_per_block=1)  # fmt: skip


def pick_density(name: str, events: int) -> Density:
    """The density called ``name`` ("dense", "sparse" or "sparse-wide") for ``events``."""
    if name == "dense":
        return DENSE
    if name == "sparse":
        return sparse(events)
    if name == "sparse-wide":
        return SPARSE_WIDE
    raise ValueError(f"unknown density {name!r}: dense, sparse or sparse-wide")


@dataclass(frozen=True)
class Workload:
    density: str
    events: int
    jobs: int
    first_job: int
    first_block: int
    last_block: int
    transactions: int
    gas_used: int
    seconds: float

    @property
    def blocks(self) -> int:
        return self.last_block - self.first_block + 1


def indexed_events(url: str, d: Deployment, wl: Workload) -> int:
    """The escrow events a backfill from the deployment's block through ``wl`` indexes: the
    workload's and those the escrow emitted before it (the deployment's own settings: the
    payment token allowed, the hook whitelisted; any earlier workload)."""
    if wl.first_block <= d.start_block:
        return wl.events
    before = {"address": d.erc8183, "fromBlock": hex(d.start_block),
              "toBlock": hex(wl.first_block - 1)}  # fmt: skip
    return wl.events + len(rpc_call(url, "eth_getLogs", [before]))


def canonical_multicall(url: str, d: Deployment) -> None:
    """The devnet's Multicall3 code at the canonical address, where a real chain has it:
    the daemon's reads find it there with no configuration, as on mainnet."""
    code = rpc_call(url, "eth_getCode", [d.multicall, "latest"])
    rpc_call(url, set_code_method(url), [MULTICALL3_ADDRESS, code])
    rpc_call(url, "evm_mine", [])


def set_code_method(url: str) -> str:
    """The dev node's own method for putting code at an address (bench/hardhat_node.py)."""
    client = str(rpc_call(url, "web3_clientVersion"))
    return "hardhat_setCode" if client.startswith("HardhatNetwork/") else "anvil_setCode"


def deploy_driver(url: str, d: Deployment) -> str:
    """The driver (with its provider and evaluator contracts) on ``d.erc8183``."""
    escrow, token = Web3.to_checksum_address(d.erc8183), Web3.to_checksum_address(d.usdc)
    return deploy_contract(connect(url), DEV_KEYS[0], "BulkJobDriver", escrow, token)


def _waves(jobs: int, per_tx: int, first_id: int) -> list[list[int]]:
    return [
        list(range(first_id + lo, first_id + min(jobs, lo + per_tx)))
        for lo in range(0, jobs, per_tx)
    ]


def _step_data(waves: list[list[int]], k: int) -> str:
    """Wave k's transaction: create wave k, then stage s for wave k - s (s = 1..4)."""

    def wave(i: int) -> list[int]:
        return waves[i] if 0 <= i < len(waves) else []

    descriptions = [description(j) for j in wave(k)]
    return calldata(_STEP_SIG, _STEP_TYPES,
                    [descriptions, wave(k - 1), wave(k - 2), wave(k - 3), wave(k - 4)])  # fmt: skip


def _rpc_batch(url: str, calls: list[tuple[str, list[Any]]]) -> list[Any]:
    body = [{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls)]
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        replies = sorted(json.loads(resp.read()), key=lambda r: r["id"])
    for r in replies:
        if "error" in r:
            raise RuntimeError(f"{calls[r['id']][0]} failed: {r['error']}")
    return [r["result"] for r in replies]


def _receipts(url: str, hashes: list[str]) -> tuple[list[int], int, int]:
    """(block numbers, escrow-sized log count, gas used) of ``hashes``, all required mined OK."""
    blocks: list[int] = []
    logs = gas = 0
    for i in range(0, len(hashes), _RECEIPTS_AT_ONCE):
        chunk = hashes[i : i + _RECEIPTS_AT_ONCE]
        deadline = time.monotonic() + 600
        while True:
            got = _rpc_batch(url, [("eth_getTransactionReceipt", [h]) for h in chunk])
            if all(r is not None for r in got) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for h, r in zip(chunk, got, strict=True):
            if r is None:
                raise TimeoutError(f"no receipt for workload transaction {h}")
            if r["status"] != "0x1":
                raise RuntimeError(f"workload transaction reverted: {h}")
            blocks.append(int(r["blockNumber"], 16))
            gas += int(r["gasUsed"], 16)
            logs += len(r["logs"])
    return blocks, logs, gas


def job_flows(url: str, d: Deployment, driver: str, events: int, density: Density) -> Workload:
    """Run ``events`` (rounded up to whole jobs) worth of job lifecycles at ``density``.

    Requires the driver to be the escrow's only job creator since deployment (job ids are
    sequential, so wave k's ids are known before it is sent); checked afterwards.
    """
    escrow = connect(url).eth.contract(
        address=Web3.to_checksum_address(d.erc8183),
        abi=[{"type": "function", "name": "jobCounter", "stateMutability": "view",
              "inputs": [], "outputs": [{"name": "", "type": "uint256"}]}],
    )  # fmt: skip
    first_id = int(escrow.functions.jobCounter().call()) + 1
    jobs = -(-events // EVENTS_PER_JOB)
    waves = _waves(jobs, density.jobs_per_tx, first_id)
    sender = Sender(url)
    start = time.monotonic()
    hashes: list[str] = []
    total_txs = len(waves) + STAGES - 1  # the last four only finish older waves
    rpc_call(url, "evm_setAutomine", [False])  # so each block holds exactly its transactions
    try:
        for k in range(total_txs):
            hashes.append(sender.send(driver, _step_data(waves, k), density.gas_per_tx))
            if len(hashes) % density.txs_per_block == 0 or k == total_txs - 1:
                rpc_call(url, "evm_mine", [], timeout=120)
    finally:
        rpc_call(url, "evm_setAutomine", [True])
    blocks, all_logs, gas = _receipts(url, hashes)
    # the receipts also hold the token's Transfer logs: 1 mint per fund step, 1 pull per
    # funded job and 3 payouts per completed job
    counter = int(escrow.functions.jobCounter().call())
    if counter != first_id + jobs - 1:
        raise RuntimeError(f"escrow holds jobs up to {counter}, expected {first_id + jobs - 1}")
    token_logs = sum(1 for k in range(total_txs) if 0 <= k - 2 < len(waves)) + 4 * jobs
    escrow_logs = all_logs - token_logs
    if escrow_logs != jobs * EVENTS_PER_JOB:
        raise RuntimeError(f"workload emitted {escrow_logs} logs, expected {jobs * EVENTS_PER_JOB}")
    return Workload(
        density=density.name,
        events=escrow_logs,
        jobs=jobs,
        first_job=first_id,
        first_block=min(blocks),
        last_block=max(blocks),
        transactions=len(hashes),
        gas_used=gas,
        seconds=time.monotonic() - start,
    )
