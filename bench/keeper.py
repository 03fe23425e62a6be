"""Benchmark 3: 1,000 jobs expiring in one block, refunded by the keeper; batched vs single gas.

The AgenticCommerce escrow is the measured pair; the same number of jobs on the
ERC8183-shaped escrow (``claimRefund(uint256,bytes)``, 13-field getJob, uint48
expiry) is refunded batched too, so the newest dialect takes the same code paths
under load.

The same chain state is replayed twice from an anvil snapshot: once with
Multicall3 batching (``batch_size`` refunds per transaction), once with one
transaction per refund. Blocks come every second (anvil interval mining, like
a 1 s L2); in-process, the indexer follows the chain into a fresh database and
the keeper ticks on every indexed head with the projections from that
database, as in the daemon. Counted from the deadline block: blocks until the
last refund is mined and seconds until the index shows every job expired.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Result, Sender, calldata, wait_receipts, write_config
from keeper.act import Keeper, KeeperSettings, Signer
from keeper.app import build_rpc, sync_settings, watched
from keeper.config import load_config
from keeper.devnet.anvil import DEV_KEYS, AnvilProcess, ChainControl, rpc_call
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.store.db import connect
from keeper.store.index_store import IndexStore
from keeper.store.migrations import migrate
from keeper.store.states import live_jobs, live_tasks
from keeper.sync.indexer import Indexer

CLIENT_KEY = DEV_KEYS[1]
PROVIDER_KEY = DEV_KEYS[2]  # ERC8183: the provider sets the budget
KEEPER_KEY = DEV_KEYS[7]
BUDGET = 10**6
BLOCK_TIME = 1  # seconds (anvil interval mining takes whole seconds)


def funded_jobs(url: str, d: Deployment, n: int, expired_at: int) -> None:
    """``n`` Funded jobs sharing one deadline, 200 jobs (600 txs) per mined block."""
    chain = ChainControl(url)
    deployer, client = Sender(url, DEV_KEYS[0]), Sender(url, CLIENT_KEY)
    wait_receipts(url, [
        deployer.send(d.usdc, calldata("mint(address,uint256)", ["address", "uint256"],
                                       [client.address, BUDGET * n]), 200_000),
        client.send(d.usdc, calldata("approve(address,uint256)", ["address", "uint256"],
                                     [d.commerce, BUDGET * n]), 200_000),
    ])  # fmt: skip
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


def erc8183_funded_jobs(url: str, d: Deployment, n: int, expired_at: int) -> None:
    """``n`` Funded jobs on the ERC8183 escrow: createJob, setBudget (provider), fund."""
    chain = ChainControl(url)
    deployer, client = Sender(url, DEV_KEYS[0]), Sender(url, CLIENT_KEY)
    provider = Sender(url, PROVIDER_KEY)
    wait_receipts(url, [
        deployer.send(d.usdc, calldata("mint(address,uint256)", ["address", "uint256"],
                                       [client.address, BUDGET * n]), 200_000),
        client.send(d.usdc, calldata("approve(address,uint256)", ["address", "uint256"],
                                     [d.erc8183, BUDGET * n]), 200_000),
    ])  # fmt: skip
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


def keeper_gas(url: str, keeper_address: str, first: int, last: int) -> tuple[int, int, int]:
    """(transactions, total gas, refunds) the keeper got mined in blocks first..last."""
    txs = gas = refunds = 0
    refunded = "0x" + "7ca5472b"  # topic0 prefix of Refunded(uint256,address,uint256)
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


async def run_mode(url: str, d: Deployment, n: int, expired_at: int, work: Path,
                   multicall: str | None, batch_size: int,
                   escrow: str = "commerce") -> dict[str, Any]:  # fmt: skip
    """Index, cross the deadline, and tick the keeper until every job is expired in the index."""
    chain = ChainControl(url)
    name = ("batched" if multicall else "single") + ("" if escrow == "commerce" else f"-{escrow}")
    address = str(getattr(d, escrow))
    cfg = load_config(write_config(work, name, url, d, [(escrow, "erc8183", address)]))
    conn = connect(cfg.database.path)
    migrate(conn)
    rpc = build_rpc(cfg, None)
    indexer = Indexer(rpc, IndexStore(conn, cfg.chain.chain_id), watched(cfg), sync_settings(cfg))
    keeper = Keeper(
        settings=KeeperSettings(max_fee_cap=100 * 10**9, confirmations=1, min_balance_wei=10**15,
                                multicall=multicall, batch_size=batch_size),
        chain_id=cfg.chain.chain_id, rpc=rpc, db=conn, signer=Signer(KEEPER_KEY),
        contracts=cfg.contracts,
    )  # fmt: skip
    try:
        await indexer.backfill()
        await keeper.recover()
        chain.set_automine(False)
        chain.mine_at(expired_at)  # the deadline block: every job is now refundable
        deadline_block = chain.block_number()
        t0 = time.perf_counter()
        chain.call("evm_setIntervalMining", BLOCK_TIME)
        done_at = None
        ticks = 0
        while time.perf_counter() - t0 < 120:
            await indexer.step()
            head = indexer.state.head
            assert head is not None
            if indexer.start_cursor() >= head.number:
                expired = conn.execute(
                    "SELECT count(*) FROM jobs WHERE contract = ? AND status = 'expired'",
                    (address,),
                ).fetchone()[0]
                if expired == n:
                    done_at = time.perf_counter() - t0
                    break
                await keeper.tick(head, live_jobs(conn, cfg.chain.chain_id),
                                  live_tasks(conn, cfg.chain.chain_id))  # fmt: skip
                ticks += 1
            await asyncio.sleep(0.05)
        chain.call("evm_setIntervalMining", 0)
        if done_at is None:
            raise RuntimeError(f"{name}: not every job was refunded within 120 s")
        last_refund = conn.execute(
            "SELECT max(block_number) FROM events WHERE contract = ? AND name = 'Refunded'",
            (address,),
        ).fetchone()[0]
        txs, gas, refunds = keeper_gas(url, keeper.address.lower(), deadline_block + 1,
                                       last_refund)  # fmt: skip
        if refunds != n:
            raise RuntimeError(f"{name}: {refunds} Refunded logs from the keeper, expected {n}")
        return {
            "deadline_block": deadline_block,
            "last_refund_block": last_refund,
            "blocks": last_refund - deadline_block,
            "seconds": done_at,
            "transactions": txs,
            "gas": gas,
            "gas_per_refund": gas / n,
            "ticks": ticks,
        }
    finally:
        await rpc.close()
        conn.close()


def bench_keeper(n: int, mode: str, batch_size: int = 50) -> Result:
    res = Result("keeper", mode)
    with AnvilProcess() as node, tempfile.TemporaryDirectory(prefix="bench-keep-") as tmp:
        d = deploy_all(node.url)
        chain = ChainControl(node.url)
        expired_at = chain.timestamp() + 3600
        funded_jobs(node.url, d, n, expired_at)
        erc8183_funded_jobs(node.url, d, n, expired_at)
        snap = chain.snapshot()
        batched = asyncio.run(run_mode(node.url, d, n, expired_at, Path(tmp), d.multicall,
                                       batch_size))  # fmt: skip
        chain.revert(snap)
        snap = chain.snapshot()  # a snapshot is spent by its revert
        chain.set_automine(True)
        single = asyncio.run(run_mode(node.url, d, n, expired_at, Path(tmp), None, batch_size))
        chain.revert(snap)
        chain.set_automine(True)
        erc8183 = asyncio.run(run_mode(node.url, d, n, expired_at, Path(tmp), d.multicall,
                                       batch_size, escrow="erc8183"))  # fmt: skip
    res.details = {"jobs": n, "batch_size": batch_size, "block_time_s": BLOCK_TIME,
                   "batched": batched, "single": single, "erc8183_batched": erc8183}  # fmt: skip
    res.add(f"blocks until {n:,} refunds, batched", batched["blocks"], "blocks", 3, higher=False)
    res.add(f"seconds until {n:,} refunds indexed, batched", batched["seconds"], "s")
    # one transaction per refund is the comparison for gas; the latency target is the
    # keeper's configured (batched) mode
    res.add(f"blocks until {n:,} refunds, single txs", single["blocks"], "blocks")
    res.add(f"seconds until {n:,} refunds indexed, single", single["seconds"], "s")
    res.add("gas per refund, batched", batched["gas_per_refund"], "gas")
    res.add("gas per refund, single", single["gas_per_refund"], "gas")
    res.add(f"blocks until {n:,} refunds, ERC8183 batched", erc8183["blocks"], "blocks")
    res.add("gas per refund, ERC8183 batched", erc8183["gas_per_refund"], "gas")
    res.add("batched gas / single gas", batched["gas_per_refund"] / single["gas_per_refund"],
            "x", 0.6, higher=False)  # fmt: skip
    return res
