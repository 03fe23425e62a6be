"""Reorg torture: random anvil_reorg of depth 1..window under live traffic and a live keeper;
a reorg deeper than the window halts indexing cleanly while the process keeps serving."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from eth_abi.abi import encode
from eth_utils.crypto import keccak
from rel_checks import converge_and_check, fail
from rel_daemon import DaemonProc, keeper_traffic
from rel_report import REPORT, Figures
from rel_sizes import SIZES, Size
from sync_support import write_config

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess, ChainControl
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.devnet.traffic import KEEPER_KEY, address_of
from keeper.domain.event_catalog import topic0_of

WINDOW = 12
DEV0 = address_of(DEV_KEYS[0]).lower()
VERDICT_TOPICS = {
    topic0_of("JobCompleted(uint256,address,bytes32)"),
    topic0_of("JobRejected(uint256,address,bytes32)"),
    topic0_of("TaskEvaluated(bytes32,address,uint8,uint16)"),
}


# anvil's reorg emulation wears out after about a hundred anvil_reorg calls on one
# chain: with its default state handling it loses our contracts' code (calls answer
# empty data, transactions to them emit nothing; seen at reorg 89 of a long run,
# reproduced alone at reorg 112), and keeping every state in memory instead
# (--prune-history) leaves an account's nonce behind a transaction of its own mined
# in a canonical block (seen near reorg 100). Neither is something a real node does,
# so the long run tortures a fresh chain (node, contracts, daemon) every 50 reorgs.
REORGS_PER_CHAIN = 50
ANVIL_ARGS = ["--prune-history", "100000"]


def emitter_tx(deployment: Deployment, job_id: int, amount: int) -> dict[str, Any]:
    """A transaction for anvil_reorg's replacement blocks: JobFunded from the emitter."""
    selector = keccak(text="emitJobFunded(uint256,address,uint256)")[:4]
    data = selector + encode(["uint256", "address", "uint256"], [job_id, DEV0, amount])
    return {"from": DEV0, "to": deployment.emitter, "data": "0x" + data.hex(), "gas": hex(200_000)}


def removed_contents(chain: ChainControl, depth: int, keeper: str) -> tuple[int, int]:
    """(keeper transactions, verdict events) in the ``depth`` blocks a reorg will replace."""
    head = chain.block_number()
    keeper_txs = verdicts = 0
    for number in range(head - depth + 1, head + 1):
        block = chain.call("eth_getBlockByNumber", hex(number), True)
        keeper_txs += sum(1 for tx in block["transactions"] if tx["from"].lower() == keeper)
        logs = chain.call("eth_getLogs", {"blockHash": block["hash"]})
        verdicts += sum(1 for log in logs if log["topics"] and log["topics"][0] in VERDICT_TOPICS)
    return keeper_txs, verdicts


def last_keeper_block(chain: ChainControl, keeper: str, lookback: int) -> int | None:
    head = chain.block_number()
    for number in range(head, max(0, head - lookback), -1):
        block = chain.call("eth_getBlockByNumber", hex(number), True)
        if any(tx["from"].lower() == keeper for tx in block["transactions"]):
            return number
    return None


async def synced(daemon: DaemonProc, chain: ChainControl, within: float) -> bool:
    """The daemon's cursor sits on the canonical chain at or above the head seen now."""
    target = await asyncio.to_thread(chain.block_number)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and daemon.alive():
        status = await daemon.status()
        if status is not None and (status.get("indexed_block") or -1) >= target:
            number = int(status["indexed_block"])
            block = await asyncio.to_thread(chain.block, number)
            if block["hash"] == status.get("indexed_hash"):
                ready = await daemon.aget("/readyz")
                if ready is not None and ready[0] == 200:
                    return True
        await asyncio.sleep(0.1)
    return False


@pytest.mark.parametrize("size", SIZES)
async def test_reorg_torture_converges_and_keeps_every_action(size: Size, tmp_path: Path) -> None:
    """Reorgs of 1..window blocks, some removing keeper txs and verdicts: fresh-backfill tables,
    every due action confirmed on the surviving chain, none twice."""
    fig = REPORT.figures(size.name)
    rng = random.Random(8195 + size.reorgs)
    done = 0
    while done < size.reorgs:
        n = min(REORGS_PER_CHAIN, size.reorgs - done)
        with AnvilProcess(extra_args=ANVIL_ARGS) as anvil:
            await torture_one_chain(anvil, tmp_path / f"chain{done}", n, done, rng, fig)
        done += n
    assert fig.reorgs_removing_keeper_txs >= 1
    assert fig.reorgs_removing_verdicts >= 1


async def torture_one_chain(
    anvil: AnvilProcess, tmp: Path, reorgs: int, first: int, rng: random.Random, fig: Figures
) -> None:
    """``reorgs`` reorgs under traffic on one fresh chain, then converge and check it all."""
    await asyncio.to_thread(tmp.mkdir)
    chain = ChainControl(anvil.url)
    keeper = address_of(KEEPER_KEY).lower()
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    cfg = write_config(
        tmp, "reorg", [anvil.url], deployed, poll_interval=0.1, window=WINDOW,
        finality="confirmations", confirmations=WINDOW,
    )  # fmt: skip
    gen = keeper_traffic(anvil.url, deployed)
    for _ in range(3):  # the traffic's mint/approve must lie deeper than any reorg
        await asyncio.to_thread(gen.step)
    await asyncio.to_thread(chain.mine, WINDOW + 1)
    daemon = DaemonProc.for_config(tmp / "reorg.toml", tmp / "reorg.log")
    daemon.start()
    try:
        assert await daemon.wait_ready(60) is not None, daemon.tail()
        for i in range(first, first + reorgs):
            for _ in range(rng.randint(1, 2)):
                await asyncio.to_thread(gen.step)
            assert await synced(daemon, chain, 30), daemon.tail()
            await asyncio.sleep(rng.uniform(0.1, 0.6))  # the keeper sends on the new head
            depth = rng.randint(1, WINDOW)
            sent_at = await asyncio.to_thread(last_keeper_block, chain, keeper, WINDOW)
            # the head after the keeper's last transaction was found: read before it, a
            # transaction mined in between lay above it and the depth came out 0
            head = await asyncio.to_thread(chain.block_number)
            if sent_at is not None and rng.random() < 0.6:
                depth = min(WINDOW, max(1, head - sent_at + 1 + rng.randint(0, 2)))  # take it out
            txs, verdicts = await asyncio.to_thread(removed_contents, chain, depth, keeper)
            replacement = [
                (emitter_tx(deployed, 50_000 + i * 10 + k, 7 + k), k % depth)
                for k in range(rng.randint(0, 2))
            ]
            await asyncio.to_thread(chain.reorg, depth, replacement)
            fig.reorgs_total += 1
            fig.reorgs_removing_keeper_txs += int(txs > 0)
            fig.reorgs_removing_verdicts += int(verdicts > 0)
            ok = await synced(daemon, chain, 30)
            assert fail(fig, ok, f"not back on the canonical chain after reorg {depth}"), (
                daemon.tail()
            )
            fig.reorgs_survived += 1
            REPORT.flush()
        final = await converge_and_check(daemon, cfg, chain, anvil.url, deployed, tmp, fig)
    finally:
        if daemon.alive():
            daemon.kill()
        REPORT.flush()
    assert final.audit.txs >= 3, final


@pytest.mark.parametrize("size", SIZES)
async def test_reorg_deeper_than_the_window_halts_and_keeps_serving(
    size: Size, anvil: AnvilProcess, chain: ChainControl, tmp_path: Path
) -> None:
    """A reorg past the window: /readyz 503 naming the halt, /healthz and the API still up."""
    fig = REPORT.figures(size.name)
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    write_config(
        tmp_path, "deep", [anvil.url], deployed, poll_interval=0.1, window=4,
        finality="confirmations", confirmations=2,
    )  # fmt: skip
    await asyncio.to_thread(chain.mine, 20)
    daemon = DaemonProc.for_config(tmp_path / "deep.toml", tmp_path / "deep.log")
    daemon.start()
    try:
        assert await synced(daemon, chain, 60), daemon.tail()
        before = await daemon.status()
        await asyncio.to_thread(chain.reorg, 12, [])
        await asyncio.to_thread(chain.mine, 2)
        body: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply = await daemon.aget("/readyz")
            if reply is not None and reply[0] == 503:
                body = json.loads(reply[1])
                if "indexing" in body.get("failed", []):
                    break
            await asyncio.sleep(0.1)
        assert "indexing" in body.get("failed", []), (body, daemon.tail())
        assert "deeper than the block window" in body["checks"]["indexing"]["detail"]
        await asyncio.sleep(1.0)
        assert daemon.alive(), daemon.tail()
        health = await daemon.aget("/healthz")
        assert health is not None and health[0] == 200
        status = await daemon.status()
        assert status is not None and status["halted"] is True
        assert before is not None
        # nothing was "repaired": the cursor did not move past the fork silently
        assert status["indexed_block"] == before["indexed_block"]
        metrics = await daemon.aget("/metrics")
        assert metrics is not None and b"keeper_indexing_halted 1.0" in metrics[1]
        assert daemon.stop() == 0, daemon.tail()
        fig.deep_reorg_halts_clean += 1
    finally:
        if daemon.alive():
            daemon.kill()
        REPORT.flush()
