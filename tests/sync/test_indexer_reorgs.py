"""Reorgs (anvil_reorg) of depth 1 to the window leave the index equal to a fresh backfill;
deeper ones halt loudly; a lagging node causes no rollback."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from eth_abi.abi import encode
from eth_utils.crypto import keccak
from support.rpc_proxy import RpcProxy
from sync_support import Harness, fresh_index, run_traffic, table_diff, traffic, write_config

from keeper.compose import build_rpc
from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.errors import DeepReorgError

WINDOW = 24
DEV0 = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"


@pytest.fixture
def deployed(anvil: AnvilProcess) -> Deployment:
    return deploy_all(anvil.url)


def emitter_tx(deployment: Deployment, job_id: int, amount: int) -> dict[str, Any]:
    """A transaction for anvil_reorg's replacement blocks: JobFunded from the emitter."""
    selector = keccak(text="emitJobFunded(uint256,address,uint256)")[:4]
    data = selector + encode(["uint256", "address", "uint256"], [job_id, DEV0, amount])
    return {"from": DEV0, "to": deployment.emitter, "data": "0x" + data.hex(), "gas": hex(200_000)}


async def test_reorgs_up_to_the_window_converge_to_a_fresh_backfill(
    anvil: AnvilProcess,
    chain: ChainControl,
    deployed: Deployment,
    tmp_path: Path,
    new_db: Callable[[], str],
) -> None:
    """Random reorgs of depth 1..window, replacing blocks that held our events, then converge
    (on either backend, to the same tables as a fresh backfill into SQLite)."""
    cfg = write_config(tmp_path, "live", [anvil.url], deployed, database=new_db(), window=WINDOW)
    live = Harness(cfg)
    gen = traffic(anvil.url, deployed)
    rng = random.Random(7)
    try:
        await run_traffic(gen, 10)
        await live.to_head()
        depths = [1, 2, WINDOW - 1, *(rng.randint(1, WINDOW - 1) for _ in range(5))]
        for i, depth in enumerate(depths):
            events_before = live.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
            replacement = [
                (emitter_tx(deployed, 1000 + i * 10 + k, 7 + k), k % depth) for k in range(3)
            ]
            chain.reorg(depth, replacement)
            await live.to_head()
            assert live.indexer.state.reorgs == i + 1
            # the replacement events are in, whatever was removed is out
            funded = live.conn.execute(
                "SELECT COUNT(*) FROM events WHERE contract = ? AND name = 'JobFunded' "
                "AND subject = ?",
                (deployed.emitter, str(1000 + i * 10)),
            ).fetchone()[0]
            assert funded == 1
            assert events_before > 0
            await run_traffic(gen, 2)
            await live.to_head()
        fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
        try:
            assert table_diff(live.dump(), fresh.dump()) == ""
            assert live.dump() == fresh.dump()
        finally:
            await fresh.close()
    finally:
        await live.close()


async def test_reorg_removing_a_verdict_removes_it_from_the_projection(
    anvil: AnvilProcess, chain: ChainControl, deployed: Deployment, tmp_path: Path
) -> None:
    """A completed job whose JobCompleted block is reorged out returns to submitted."""
    cfg = write_config(tmp_path, "live", [anvil.url], deployed, window=WINDOW)
    live = Harness(cfg)
    gen = traffic(anvil.url, deployed)
    try:
        await run_traffic(gen, 1)  # scenario 1: a job completed by the evaluator
        await live.to_head()
        row = live.conn.execute(
            "SELECT job_id, block_number FROM jobs JOIN events ON events.contract = jobs.contract "
            "AND events.subject = jobs.job_id AND events.name = 'JobCompleted' "
            "WHERE jobs.status = 'completed' ORDER BY block_number DESC LIMIT 1"
        ).fetchone()
        assert row is not None
        job_id, block = row
        depth = chain.block_number() - block + 1
        assert depth <= WINDOW
        chain.reorg(depth, [])
        await live.to_head()
        status = live.conn.execute(
            "SELECT status FROM jobs WHERE job_id = ? AND contract = ?", (job_id, deployed.commerce)
        ).fetchone()
        assert status is not None and status[0] != "completed"
    finally:
        await live.close()


async def test_reorg_deeper_than_the_window_halts(
    anvil: AnvilProcess, chain: ChainControl, deployed: Deployment, tmp_path: Path
) -> None:
    """No block of the window survives: DeepReorgError, and nothing is rolled back."""
    cfg = write_config(
        tmp_path, "live", [anvil.url], deployed, window=4, finality="confirmations",
        confirmations=2,
    )  # fmt: skip
    live = Harness(cfg)
    try:
        chain.mine(20)
        await live.to_head()
        before = live.store.dump()
        chain.reorg(12, [])
        with pytest.raises(DeepReorgError) as info:
            await live.step()
        assert "deeper than the block window" in str(info.value)
        assert live.store.dump() == before
    finally:
        await live.close()


async def test_lagging_node_triggers_no_rollback(
    anvil: AnvilProcess, chain: ChainControl, deployed: Deployment, tmp_path: Path
) -> None:
    """A node whose head goes backwards with matching hashes is lagging, not reorging."""
    cfg = write_config(tmp_path, "live", [anvil.url], deployed, window=WINDOW)
    live = Harness(cfg)
    try:
        gen = traffic(anvil.url, deployed)
        await run_traffic(gen, 3)
        await live.to_head()
        before = live.store.dump()
        cursor = live.indexer.start_cursor()
        with RpcProxy(anvil.url) as proxy:
            proxy.rules.lag = 5
            lagging_cfg = write_config(tmp_path, "lag", [proxy.url], deployed, window=WINDOW)
            lagging = Harness(cfg, rpc=build_rpc(lagging_cfg, None))
            try:
                for _ in range(3):
                    await lagging.step()
                assert lagging.indexer.state.head is not None
                assert lagging.indexer.state.head.number == cursor - 5
                assert lagging.indexer.state.reorgs == 0
                assert lagging.indexer.start_cursor() == cursor
                assert lagging.store.dump() == before
            finally:
                await lagging.rpc.close()
    finally:
        await live.close()


async def test_a_stale_block_in_hand_is_refetched_not_looped_on(
    anvil: AnvilProcess, chain: ChainControl, deployed: Deployment, tmp_path: Path
) -> None:
    """A head fetched before a reorg is dropped once our index moved onto the new branch."""
    import asyncio

    cfg = write_config(tmp_path, "live", [anvil.url], deployed, window=WINDOW)
    live = Harness(cfg)
    try:
        chain.mine(3)
        await live.to_head()
        cursor = live.indexer.start_cursor()
        chain.mine(3)
        stale = await live.rpc.get_block_and_bloom(cursor + 3)  # branch A's head
        assert stale is not None
        chain.reorg(3, [(emitter_tx(deployed, 777, 1), 0)])  # branch B from cursor + 1
        # as if heads() fetched branch A's head just before the reorg: following walks
        # B's blocks cursor+1, cursor+2 and then meets A's head, whose parent is not ours
        live.indexer._head_bloom = stale
        head = cursor + 3
        await asyncio.wait_for(
            live.indexing.consume(live.indexer.follow(cursor, head, head - 8)), timeout=20
        )
        assert live.indexer.state.reorgs == 0  # nothing we indexed was replaced
        await live.to_head()
        assert live.indexer.start_cursor() == head
        assert live.store.window()[-1].hash == chain.block(head)["hash"]
        funded = live.conn.execute(
            "SELECT COUNT(*) FROM events WHERE contract = ? AND subject = '777'",
            (deployed.emitter,),
        ).fetchone()[0]
        assert funded == 1
    finally:
        await live.close()
