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
from keeper.domain.model import ArgValue, ChainRead
from keeper.domain.reads import STABLE_FIELDS, ReadRequest
from keeper.sync.indexer import _again


def config_read(
    conn: sqlite3.Connection, contract: str, task: bytes, block: int
) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT block_number, block_hash, result_json FROM chain_reads WHERE contract = ? "
        "AND subject = ? AND kind = 'getTaskEvaluatorConfig' AND block_number = ?",
        (contract, "0x" + task.hex(), block),
    ).fetchall()


@pytest.mark.parametrize("restart", [False, True], ids=["same-process", "after-restart"])
async def test_a_read_made_at_the_head_is_made_again_before_the_cursor_passes_it(
    restart: bool, anvil: AnvilProcess, tmp_path: Path
) -> None:
    """Shown on a read whose fields change (a job's getJob keeps only fields that never
    change, so the race cannot reach it): TaskSubmitted's evaluator config, whose stake
    the evaluation in the next block returns to the evaluator."""
    deployed: Deployment = await asyncio.to_thread(deploy_all, anvil.url)
    chain = ChainControl(anvil.url)
    gen = traffic(anvil.url, deployed)
    with RpcProxy(anvil.url) as proxy:
        cfg = write_config(
            tmp_path, "tip", [proxy.url], deployed, finality="confirmations", confirmations=4
        )
        h = Harness(cfg)
        try:
            await asyncio.to_thread(gen._setup)  # the client's USDC and approvals
            task, reward, _ = await asyncio.to_thread(gen._new_task, gen.taskmarket, evaluator=True)
            await asyncio.to_thread(chain.mine, 1)  # so the creation's read is not a tip read
            await h.to_head()
            # submitWork in block N, evaluate (the stake goes back: 0) in block N+1
            await asyncio.to_thread(gen._work, gen.taskmarket, task)
            await asyncio.to_thread(gen._evaluate, gen.taskmarket, task, 0, gen._award(reward))
            proxy.rules.lag = 1  # the node still calls N its head ...
            proxy.rules.on("eth_call", ahead=1)  # ... and answers a call at N from N+1's state
            await h.to_head()
            assert proxy.count("ahead", "eth_call") == 1
            submitted = await asyncio.to_thread(chain.block_number) - 1
            assert h.indexer.start_cursor() == submitted
            fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
            try:
                truth = config_read(fresh.conn, deployed.taskmarket, task, submitted)
                assert truth and truth[0][0] == submitted
                # the injected race really put the stake of block N+1 into the read at N
                assert config_read(h.conn, deployed.taskmarket, task, submitted) != truth

                proxy.rules.clear()
                if restart:
                    await h.close()
                    h = Harness(cfg)
                await asyncio.to_thread(chain.mine, 1)
                await h.to_head()
                assert config_read(h.conn, deployed.taskmarket, task, submitted) == truth
                await fresh.to_head()
                assert table_diff(h.dump(), fresh.dump()) == ""
            finally:
                await fresh.close()
        finally:
            await h.close()


@pytest.mark.parametrize(
    ("kind", "result", "stable"),
    [
        ("getJob", {"error": "state unavailable", "reason": "pruned"}, STABLE_FIELDS["getJob"]),
        ("getJob", {"id": "7", "description": "d", "budget": "5"}, ("id", "description", "budget")),
        ("getTaskEvaluatorConfig", {"error": "reverted", "reason": "x"}, ()),
    ],
    ids=["failed", "answered", "no-stable-fields"],
)
def test_a_read_made_again_records_what_it_recorded(
    kind: str, result: dict[str, ArgValue], stable: tuple[str, ...]
) -> None:
    """The request that makes a head read again keeps the fields the read recorded; a read
    that failed takes its kind's stable fields (with none, a getJob made again later
    would record no description)."""
    read = ChainRead("0x" + "11" * 20, "7", kind, 5, "0x" + "ab" * 32, result)
    again = _again(read)
    assert again == ReadRequest(read.contract, "7", kind, 5, read.block_hash, stable)
