"""Historical batches stay within their event and byte bounds on a dense chain.

A real anvil with the devnet emitter's job flows (hundreds of events a block,
and one block over the bound): every committed batch of a bounded index holds
at most ``batch_events`` events and ``batch_bytes`` answer bytes unless it is a
single block, and the index equals the one built in unbounded batches. The
batches after the next are fetched while one commits (their headers asked for
already), and closing the scan early leaves no fetch running.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.rpc_proxy import RpcProxy
from sync_support import Harness, emit_job_flows, table_diff, write_config

from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.domain.model import BlockHeader, Event
from keeper.indexing import NullListener
from keeper.rpc import EndpointConfig, RpcClient
from keeper.rpc.scan import wire_size
from keeper.store.index_store import ApplyResult
from keeper.sync.history import FETCHING_AHEAD

# jobs per block (6 events each): dense blocks, one block over the bound, a sparse tail
LAYOUT = [60] * 6 + [150] + [60] * 2 + [3] * 5
BOUND_EVENTS = 500


class Batches(NullListener):
    """The events of every batch the indexer committed, in order."""

    def __init__(self) -> None:
        self.batches: list[Sequence[Event]] = []

    def on_heads(self, head: BlockHeader, finalized: int, indexed: int) -> None:
        pass

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        if events:
            self.batches.append(list(events))


@pytest.fixture(scope="module")
def dense(module_anvil: AnvilProcess) -> Deployment:
    deployment = deploy_all(module_anvil.url)
    emit_job_flows(module_anvil.url, deployment, LAYOUT)
    return deployment


async def index(
    tmp: Path, name: str, url: str, d: Deployment, **chain: Any
) -> tuple[Harness, Batches]:
    cfg = write_config(tmp, name, [url], d, finality="confirmations", confirmations=0, **chain)
    seen = Batches()
    h = Harness(cfg, listener=seen)
    await h.to_head()
    return h, seen


def blocks_of(batch: Sequence[Event]) -> set[int]:
    return {e.log.block_number for e in batch}


@pytest.mark.parametrize(
    ("bound", "chain"),
    [
        ("events", {"batch_events": BOUND_EVENTS}),
        ("bytes", {"batch_bytes": 500_000}),
    ],
)
async def test_batches_stay_within_the_bound_and_index_the_same(
    module_anvil: AnvilProcess,
    dense: Deployment,
    tmp_path: Path,
    bound: str,
    chain: dict[str, int],
) -> None:
    """No committed batch passes the bound unless it is one block; the index is identical."""
    whole, whole_seen = await index(
        tmp_path, "whole", module_anvil.url, dense, batch_events=10**9, batch_bytes=10**12
    )
    bounded, seen = await index(tmp_path, "bounded", module_anvil.url, dense, **chain)
    try:
        assert len(whole_seen.batches) < len(seen.batches)
        total = sum(len(b) for b in seen.batches)
        assert total == sum(len(b) for b in whole_seen.batches) >= sum(LAYOUT) * 6
        for batch in seen.batches:
            size = len(batch) if bound == "events" else sum(wire_size(e.log) for e in batch)
            limit = chain[f"batch_{bound}"]
            assert size <= limit or len(blocks_of(batch)) == 1, (size, sorted(blocks_of(batch)))
        # the block of 150 jobs (900 events, about 570 KB) is over either bound: alone
        big = [b for b in seen.batches if len(b) == 150 * 6]
        assert len(big) == 1 and len(blocks_of(big[0])) == 1
        assert len(seen.batches) >= 6
        assert bounded.indexer.start_cursor() == whole.indexer.start_cursor()
        assert table_diff(bounded.dump(), whole.dump()) == ""
        assert bounded.dump() == whole.dump()
    finally:
        await asyncio.gather(bounded.close(), whole.close())


async def test_wire_size_estimates_the_answer(
    module_anvil: AnvilProcess, dense: Deployment
) -> None:
    """The byte bound's estimate is within a tenth of the real getLogs body's length."""
    flt = {"address": [dense.emitter], "fromBlock": "0x0", "toBlock": "latest"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [flt]}
    async with aiohttp.ClientSession() as session, session.post(module_anvil.url, json=body) as r:
        raw = await r.read()
    async with RpcClient([EndpointConfig("a", module_anvil.url)]) as client:
        head = await client.block_number()
        logs = await client.get_logs([dense.emitter], 0, head)
    assert len(logs) >= sum(LAYOUT) * 6
    estimate = sum(map(wire_size, logs))
    assert abs(estimate - len(raw)) <= len(raw) / 10, (estimate, len(raw))


async def test_batches_after_the_next_are_fetched_while_one_is_held(
    module_anvil: AnvilProcess, dense: Deployment, tmp_path: Path
) -> None:
    """When the first batch is handed over, the headers of the batches after the next
    have been asked for already; closing the scan then cancels and waits for every
    fetch started ahead of it (an error in a commit, a shutdown).

    Every call but getLogs is answered after a delay: a fetcher that fetches one
    batch after another has asked for the next batch's headers at most (the
    dense blocks here are a batch each).
    """
    with RpcProxy(module_anvil.url) as proxy:
        for label in ("eth_call", "batch"):  # a lone call, or in a JSON-RPC batch
            proxy.rules.on(label, timeout=10**6, delay=0.3)
        cfg = write_config(
            tmp_path, "early", [proxy.url], dense, finality="confirmations", confirmations=0,
            batch_events=BOUND_EVENTS,
        )  # fmt: skip
        h = Harness(cfg)
        try:
            await h.indexer.heads()
            before = asyncio.all_tasks()
            head = await h.rpc.block_number()
            scan = h.indexer.history.prefetched(dense.start_block, head)
            first = await anext(scan)
            while len(first.events) < 60 * 6:  # the deployments' blocks before the job flows
                first = await anext(scan)
            # the first dense block alone, with the few events of the deployments' blocks
            # (allowlist and whitelist settings) that fit under the bound before it
            per_block = Counter(e.log.block_number for e in first.events)
            assert sorted(per_block.values())[-1] == 60 * 6, per_block
            assert len(first.events) < 2 * 60 * 6, per_block
            asked = {
                int(params[0], 16)
                for params in proxy.requests_for("eth_getBlockByNumber")
                if str(params[0]).startswith("0x")
            }
            ahead = sorted(n for n in asked if n > first.anchor.number)
            assert len(ahead) >= FETCHING_AHEAD, (first.anchor.number, ahead)
            await scan.aclose()
            # no fetch is left to ask anything more (a request already on its way may
            # still reach the proxy after this: it is not counted)
            assert asyncio.all_tasks() == before
        finally:
            await h.close()
