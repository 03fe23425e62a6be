"""Benchmark 3: 1,000 escrows expiring in one block, refunded by the keeper; batched vs single.

Run three times: ERC-8183 jobs on AgenticCommerce (``claimRefund(uint256)``) and on the
ERC8183 escrow (``claimRefund(uint256,bytes)``), and tasks on the task market diamond
(``refundExpired(bytes32,uint256)``, created through its trusted forwarder as on the
deployed revision 21), each in the dialect the keeper detects at start-up.

The same chain state is replayed twice from an anvil snapshot: once with
Multicall3 batching (``batch_size`` refunds per transaction), once with one
transaction per refund. Blocks come every second (anvil interval mining, like
a 1 s L2); in-process, the indexer follows the chain into a fresh database and
the keeper ticks on every indexed head with the projections from that
database, as in the daemon. Counted from the deadline block: blocks until the
last refund is mined and seconds until the index shows every job expired.
Before the deadline, with every escrow open and none due, the keeper's read and plan
of one tick is timed beside the same done over every open escrow (what a tick read
before it read only the subjects past a deadline).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Result, Sender, calldata, wait_receipts, write_config
from keeper.act import Keeper, KeeperSettings, Signer
from keeper.compose import build_rpc
from keeper.config import load_config
from keeper.devnet.anvil import DEV_KEYS, AnvilProcess, ChainControl, rpc_call
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.domain.dialects import arg_types
from keeper.domain.model import BlockHeader
from keeper.domain.planner import PlannerConfig, plan
from keeper.domain.taskmodes import CLAIM
from keeper.indexing import build_indexing
from keeper.store.db import Db, connect
from keeper.store.migrations import migrate
from keeper.store.states import due_jobs, due_tasks
from tests.support.open_escrows import every_open as open_escrows


@dataclass(frozen=True)
class Escrow:
    """What one run refunds: the contract, its table and the log that proves a refund."""

    kind: str  # "jobs" or "tasks"
    contract: str
    protocol: str
    refund_event: str
    refund_topic: str  # topic0 prefix of refund_event


def job_escrow(d: Deployment) -> Escrow:
    return Escrow("jobs", d.commerce, "erc8183", "Refunded", "0x7ca5472b")


def task_escrow(d: Deployment) -> Escrow:
    return Escrow("tasks", d.taskmarket, "taskmarket", "TaskExpired", "0xe4ec5a16")


def erc8183_escrow(d: Deployment) -> Escrow:
    return Escrow("jobs", d.erc8183, "erc8183", "Refunded", "0x7ca5472b")


CLIENT_KEY = DEV_KEYS[1]
PROVIDER_KEY = DEV_KEYS[2]  # ERC8183: the provider sets the budget
KEEPER_KEY = DEV_KEYS[7]
BUDGET = 10**6
BLOCK_TIME = 1  # seconds (anvil interval mining takes whole seconds)


def funded_client(url: str, d: Deployment, spender: str, amount: int) -> Sender:
    """The client, minted ``amount`` of the token and with ``spender`` approved for it."""
    client = Sender(url, CLIENT_KEY)
    wait_receipts(url, [
        Sender(url, DEV_KEYS[0]).send(d.usdc, calldata(
            "mint(address,uint256)", ["address", "uint256"], [client.address, amount]), 200_000),
        client.send(d.usdc, calldata(
            "approve(address,uint256)", ["address", "uint256"], [spender, amount]), 200_000),
    ])  # fmt: skip
    return client


def funded_jobs(url: str, d: Deployment, n: int, expired_at: int) -> None:
    """``n`` Funded jobs sharing one deadline, 200 jobs (600 txs) per mined block."""
    chain = ChainControl(url)
    client = funded_client(url, d, d.commerce, BUDGET * n)
    create = calldata(
        "createJob(address,address,uint256,string,address,uint256)",
        ["address", "address", "uint256", "string", "address", "uint256"],
        ["0x" + "b2" * 20, "0x" + "e3" * 20, expired_at, "bench", "0x" + "00" * 20, 0],
    )
    chain.set_automine(False)
    try:
        for start in range(1, n + 1, 200):
            hashes = []
            for job in range(start, min(n, start + 199) + 1):
                hashes.append(client.send(d.commerce, create, 400_000))
                hashes.append(client.send(d.commerce, calldata(
                    "setBudget(uint256,address,uint256,bytes)",
                    ["uint256", "address", "uint256", "bytes"], [job, d.usdc, BUDGET, b""]),
                    200_000))  # fmt: skip
                hashes.append(client.send(d.commerce, calldata(
                    "fund(uint256,uint256,bytes)", ["uint256", "uint256", "bytes"],
                    [job, BUDGET, b""]), 200_000))  # fmt: skip
            while rpc_call(url, "eth_getTransactionReceipt", [hashes[-1]]) is None:
                chain.mine()
            wait_receipts(url, hashes)
    finally:
        chain.set_automine(True)


_CREATE_TASK = (
    "createTask((uint256,uint256,bytes4,uint256,uint256,bytes4),(bool,uint16),(address[],bytes),"
    "(bytes32,string,bytes32[]),(address,uint256,uint16,uint32,uint32,address))"
)


def expiring_tasks(url: str, d: Deployment, n: int, expired_at: int) -> None:
    """``n`` Claim tasks on the diamond sharing one expiryTime, 200 per mined block.

    Each block's timestamp is set first, so every task's duration lands it on
    ``expired_at`` exactly.
    """
    chain = ChainControl(url)
    client = funded_client(url, d, d.taskmarket, BUDGET * n)
    zero = "0x" + "00" * 20
    chain.set_automine(False)
    try:
        for start in range(0, n, 200):
            at = chain.timestamp() + 1
            inner = calldata(_CREATE_TASK, list(arg_types(_CREATE_TASK)), [
                (BUDGET, expired_at - at, bytes.fromhex(CLAIM[2:]), 0, 0, b"\0" * 4),
                (False, 0), ([], b""), (b"\0" * 32, "", []), (zero, 0, 0, 0, 0, zero),
            ])  # fmt: skip
            relay = calldata("forward(address,bytes)", ["address", "bytes"],
                             [d.taskmarket, bytes.fromhex(inner[2:])])  # fmt: skip
            hashes = [client.send(d.taskmarket_forwarder, relay, 400_000)
                      for _ in range(min(200, n - start))]  # fmt: skip
            chain.mine_at(at)
            wait_receipts(url, hashes)
    finally:
        chain.set_automine(True)


def erc8183_funded_jobs(url: str, d: Deployment, n: int, expired_at: int) -> None:
    """``n`` Funded jobs on the ERC8183 escrow: createJob, setBudget (provider), fund."""
    chain = ChainControl(url)
    client = funded_client(url, d, d.erc8183, BUDGET * n)
    provider = Sender(url, PROVIDER_KEY)
    create = calldata(
        "createJob(address,address,uint48,string,address,uint256,bytes)",
        ["address", "address", "uint48", "string", "address", "uint256", "bytes"],
        [provider.address, "0x" + "e3" * 20, expired_at, "bench", "0x" + "00" * 20, 0, b""],
    )
    chain.set_automine(False)
    try:
        for start in range(1, n + 1, 200):
            jobs = range(start, min(n, start + 199) + 1)
            created = [client.send(d.erc8183, create, 400_000) for _ in jobs]
            chain.mine()
            wait_receipts(url, created)
            hashes = []
            for job in jobs:
                hashes.append(provider.send(d.erc8183, calldata(
                    "setBudget(uint256,address,uint256,bytes)",
                    ["uint256", "address", "uint256", "bytes"], [job, d.usdc, BUDGET, b""]),
                    200_000))  # fmt: skip
                hashes.append(client.send(d.erc8183, calldata(
                    "fund(uint256,address,uint256,bytes)",
                    ["uint256", "address", "uint256", "bytes"], [job, d.usdc, BUDGET, b""]),
                    200_000))  # fmt: skip
            while rpc_call(url, "eth_getTransactionReceipt", [hashes[-1]]) is None:
                chain.mine()
            wait_receipts(url, hashes)
    finally:
        chain.set_automine(True)


def keeper_gas(url: str, keeper_address: str, first: int, last: int,
               refunded: str) -> tuple[int, int, int]:  # fmt: skip
    """(transactions, total gas, refunds) the keeper got mined in blocks first..last."""
    txs = gas = refunds = 0
    for n in range(first, last + 1):
        block = rpc_call(url, "eth_getBlockByNumber", [hex(n), True])
        for tx in block["transactions"]:
            if tx["from"].lower() != keeper_address:
                continue
            receipt = rpc_call(url, "eth_getTransactionReceipt", [tx["hash"]])
            txs += 1
            gas += int(receipt["gasUsed"], 16)
            refunds += sum(1 for lg in receipt["logs"] if lg["topics"][0].startswith(refunded))
    return txs, gas, refunds


def read_and_plan_ms(conn: Db, chain_id: int, head: BlockHeader, *, every_open: bool,
                     rounds: int = 15) -> float:  # fmt: skip
    """Median milliseconds of a tick's reads and plan at ``head``: of the subjects due (the
    daemon's), or of every open one (the baseline)."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        if every_open:
            jobs, tasks = open_escrows(conn, chain_id)
        else:
            jobs = due_jobs(conn, chain_id, head.timestamp)
            tasks = due_tasks(conn, chain_id, head.timestamp)
        plan(jobs, tasks, head, PlannerConfig())
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1000


async def run_mode(url: str, d: Deployment, escrow: Escrow, n: int, expired_at: int, work: Path,
                   multicall: str | None, batch_size: int) -> dict[str, Any]:  # fmt: skip
    """Index, cross the deadline, and tick the keeper until every escrow is expired in the
    index."""
    chain = ChainControl(url)
    name = f"{escrow.kind}-{'batched' if multicall else 'single'}"
    cfg = load_config(write_config(work, name, url, d,
                                   [("escrow", escrow.protocol, escrow.contract)]))  # fmt: skip
    conn = connect(cfg.database.path)
    migrate(conn)
    rpc = build_rpc(cfg, None)
    indexing = build_indexing(cfg, rpc, conn)
    indexer = indexing.indexer
    keeper = Keeper(
        settings=KeeperSettings(max_fee_cap=100 * 10**9, confirmations=1, min_balance_wei=10**15,
                                multicall=multicall, batch_size=batch_size),
        chain_id=cfg.chain.chain_id, rpc=rpc, db=conn, signer=Signer(KEEPER_KEY),
        contracts=cfg.contracts,
    )  # fmt: skip
    try:
        await indexing.backfill()
        await keeper.recover()
        before = await rpc.get_block("latest")
        assert before is not None
        due_ms = read_and_plan_ms(conn, cfg.chain.chain_id, before, every_open=False)
        open_ms = read_and_plan_ms(conn, cfg.chain.chain_id, before, every_open=True)
        chain.set_automine(False)
        chain.mine_at(expired_at)  # the deadline block: every job is now refundable
        deadline_block = chain.block_number()
        t0 = time.perf_counter()
        chain.call("evm_setIntervalMining", BLOCK_TIME)
        done_at = None
        ticks = 0
        while time.perf_counter() - t0 < 120:
            await indexing.step()
            head = indexer.state.head
            assert head is not None
            if indexer.start_cursor() >= head.number:
                expired = conn.execute(
                    f"SELECT count(*) FROM {escrow.kind} WHERE contract = ? AND status = 'expired'",
                    (escrow.contract,),
                ).fetchone()[0]
                if expired == n:
                    done_at = time.perf_counter() - t0
                    break
                await keeper.tick(head, due_jobs(conn, cfg.chain.chain_id, head.timestamp),
                                  due_tasks(conn, cfg.chain.chain_id, head.timestamp))  # fmt: skip
                ticks += 1
            await asyncio.sleep(0.05)
        chain.call("evm_setIntervalMining", 0)
        if done_at is None:
            raise RuntimeError(f"{name}: not every escrow was refunded within 120 s")
        last_refund = conn.execute(
            "SELECT max(block_number) FROM events WHERE contract = ? AND name = ?",
            (escrow.contract, escrow.refund_event),
        ).fetchone()[0]
        txs, gas, refunds = keeper_gas(url, keeper.address.lower(), deadline_block + 1,
                                       last_refund, escrow.refund_topic)  # fmt: skip
        if refunds != n:
            raise RuntimeError(
                f"{name}: {refunds} {escrow.refund_event} logs from the keeper, expected {n}"
            )
        return {
            "deadline_block": deadline_block,
            "last_refund_block": last_refund,
            "blocks": last_refund - deadline_block,
            "seconds": done_at,
            "transactions": txs,
            "gas": gas,
            "gas_per_refund": gas / n,
            "ticks": ticks,
            "read_plan_none_due_ms": due_ms,
            "read_plan_every_open_ms": open_ms,
        }
    finally:
        await rpc.close()
        conn.close()


def bench_keeper(n: int, mode: str, batch_size: int = 50, *, kind: str = "jobs") -> Result:
    """``kind`` "jobs": AgenticCommerce claimRefund(uint256); "erc8183": the ERC8183
    escrow's claimRefund(uint256,bytes); "tasks": the diamond's refundExpired."""
    res = Result({"jobs": "keeper", "erc8183": "keeper_erc8183"}.get(kind, "keeper_tasks"), mode)
    with AnvilProcess() as node, tempfile.TemporaryDirectory(prefix="bench-keep-") as tmp:
        d = deploy_all(node.url)
        chain = ChainControl(node.url)
        expired_at = chain.timestamp() + 3600
        if kind == "jobs":
            funded_jobs(node.url, d, n, expired_at)
            escrow = job_escrow(d)
        elif kind == "erc8183":
            erc8183_funded_jobs(node.url, d, n, expired_at)
            escrow = erc8183_escrow(d)
        else:
            expiring_tasks(node.url, d, n, expired_at)
            escrow = task_escrow(d)
        snap = chain.snapshot()
        batched = asyncio.run(run_mode(node.url, d, escrow, n, expired_at, Path(tmp), d.multicall,
                                       batch_size))  # fmt: skip
        chain.revert(snap)
        chain.set_automine(True)
        single = asyncio.run(run_mode(node.url, d, escrow, n, expired_at, Path(tmp), None,
                                      batch_size))  # fmt: skip
    res.details = {"escrows": kind, "count": n, "batch_size": batch_size,
                   "block_time_s": BLOCK_TIME, "batched": batched, "single": single}  # fmt: skip
    what = "task refunds" if kind == "tasks" else "refunds"
    res.add(f"blocks until {n:,} {what}, batched", batched["blocks"], "blocks", 3, higher=False)
    res.add(f"seconds until {n:,} {what} indexed, batched", batched["seconds"], "s")
    # one transaction per refund is the comparison for gas; the latency target is the
    # keeper's configured (batched) mode
    res.add(f"blocks until {n:,} {what}, single txs", single["blocks"], "blocks")
    res.add(f"seconds until {n:,} {what} indexed, single", single["seconds"], "s")
    res.add("gas per refund, batched", batched["gas_per_refund"], "gas")
    res.add("gas per refund, single", single["gas_per_refund"], "gas")
    res.add("batched gas / single gas", batched["gas_per_refund"] / single["gas_per_refund"],
            "x", 0.6, higher=False)  # fmt: skip
    res.add(f"a tick's read and plan, {n:,} open, none due", batched["read_plan_none_due_ms"],
            "ms")  # fmt: skip
    res.add("the same over every open escrow (baseline)", batched["read_plan_every_open_ms"],
            "ms")  # fmt: skip
    return res
