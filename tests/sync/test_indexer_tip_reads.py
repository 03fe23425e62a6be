"""A view call made at the node's head block may be answered from the next block's state
(anvil does this while it builds that block); the index must not keep such an answer."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.rpc_proxy import RpcProxy
from sync_support import Harness, fresh_index, table_diff, traffic, write_config

from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import Deployment, deploy_all


def job_read(conn: sqlite3.Connection, contract: str, job: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT block_number, block_hash, result_json FROM chain_reads "
        "WHERE contract = ? AND subject = ? AND kind = 'getJob'",
        (contract, str(job)),
    ).fetchall()


@pytest.mark.parametrize("restart", [False, True], ids=["same-process", "after-restart"])
async def test_a_read_made_at_the_head_is_made_again_before_the_cursor_passes_it(
    restart: bool, anvil: AnvilProcess, tmp_path: Path
) -> None:
    deployed: Deployment = await asyncio.to_thread(deploy_all, anvil.url)
    chain = ChainControl(anvil.url)
    gen = traffic(anvil.url, deployed)
    with RpcProxy(anvil.url) as proxy:
        cfg = write_config(
            tmp_path, "tip", [proxy.url], deployed, finality="confirmations", confirmations=4
        )
        h = Harness(cfg)
        try:
            await h.to_head()
            # createJob in block N, setBudget in block N+1
            job, _ = await asyncio.to_thread(gen._open_job, gen.commerce, fund=False)
            proxy.rules.lag = 1  # the node still calls N its head ...
            proxy.rules.on("eth_call", ahead=1)  # ... and answers a call at N from N+1's state
            await h.to_head()
            assert proxy.count("ahead", "eth_call") == 1
            created = await asyncio.to_thread(chain.block_number) - 1
            assert h.indexer.start_cursor() == created
            fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
            try:
                truth = job_read(fresh.conn, deployed.commerce, job)
                assert truth and truth[0][0] == created
                # the injected race really put the budget of block N+1 into the read at N
                assert job_read(h.conn, deployed.commerce, job) != truth

                proxy.rules.clear()
                if restart:
                    await h.close()
                    h = Harness(cfg)
                await asyncio.to_thread(chain.mine, 1)
                await h.to_head()
                assert job_read(h.conn, deployed.commerce, job) == truth
                await fresh.to_head()
                assert table_diff(h.dump(), fresh.dump()) == ""
            finally:
                await fresh.close()
        finally:
            await h.close()
