"""Under injected RPC faults the index still converges to the right state."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from support.rpc_proxy import ProxyRules, RpcProxy
from sync_support import (
    Harness,
    fresh_index,
    proxied_index,
    run_traffic,
    table_diff,
    traffic,
    write_config,
)
from test_indexer_crash import bulk_events

from keeper.devnet.anvil import AnvilProcess, rpc_call
from keeper.devnet.deploy import Deployment, deploy_all


@pytest.fixture
def deployed(anvil: AnvilProcess) -> Deployment:
    return deploy_all(anvil.url)


def spans(proxy: RpcProxy) -> list[int]:
    out = []
    for params in proxy.requests_for("eth_getLogs"):
        flt = params[0]
        if "fromBlock" in flt:
            out.append(int(flt["toBlock"], 16) - int(flt["fromBlock"], 16) + 1)
    return out


def faults_served(faulty: RpcProxy) -> bool:
    """Whether the convergence test's whole fault budget has been drawn."""
    return (
        faulty.count("rate_limit", "eth_getLogs") == 6
        and faulty.count("range_too_large", "eth_getLogs") >= 1
        and faulty.count("timeout") + faulty.count("garbage") >= 3
    )


async def test_converges_under_429s_timeouts_range_refusals_and_a_lagging_endpoint(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """Faults on one endpoint, lag on the other: same tables as a clean index."""
    gen = traffic(anvil.url, deployed)
    await run_traffic(gen, 8)
    await asyncio.to_thread(bulk_events, anvil.url, deployed, 30, 5)
    with RpcProxy(anvil.url) as faulty, RpcProxy(anvil.url) as lagging:
        faulty.rules.max_log_range = 9  # refusals suggest a 9-block range (Alchemy wording)
        faulty.rules.on("eth_getLogs", rate_limit=6, retry_after=0.05)
        # injected timeouts hang well past the client's timeout, and the timeout is
        # long enough that an honest answer on a loaded machine does not hit it
        faulty.rules.on("eth_getBlockByNumber", timeout=2, delay=3.5, garbage=2, null_result=1)
        faulty.rules.on("eth_call", error=2, error_message="header not found")
        lagging.rules.lag = 4
        cfg = write_config(
            tmp_path, "faulty", [faulty.url, lagging.url], deployed, finality="confirmations",
            confirmations=0, max_range=64, request_timeout=2.0,
        )  # fmt: skip
        h = Harness(cfg)
        try:
            await h.to_head()
            # Which endpoint serves a call follows health and latency, i.e. timing: on
            # a loaded machine fewer calls than the budgets may have reached the faulty
            # endpoint by the head. The faults are this test's premise, so the chain
            # grows (by more blocks than the refused range) until every one was served.
            for _ in range(10):
                if faults_served(faulty):
                    break
                await asyncio.to_thread(bulk_events, anvil.url, deployed, 12, 1)
                await h.to_head()
            assert faulty.count("rate_limit", "eth_getLogs") == 6
            assert faulty.count("range_too_large", "eth_getLogs") >= 1
            assert faulty.count("timeout") + faulty.count("garbage") >= 3
            fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
            try:
                assert table_diff(h.dump(), fresh.dump()) == ""
                assert h.dump() == fresh.dump()
            finally:
                await fresh.close()
        finally:
            await h.close()


async def test_429s_never_shrink_the_log_range(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """Rate limits back the endpoint off; no query spans less than the one before it.

    The range grows from the policy's first few blocks (nothing is known of the
    density yet) to the configured range; eight 429s on the way shrink nothing.
    """
    await asyncio.to_thread(bulk_events, anvil.url, deployed, 40, 2)
    with RpcProxy(anvil.url) as proxy:
        proxy.rules.on("eth_getLogs", rate_limit=8, retry_after=0.05)
        cfg = write_config(
            tmp_path, "limited", [proxy.url], deployed, finality="confirmations",
            confirmations=0, max_range=10, min_range=1,
        )  # fmt: skip
        h = Harness(cfg)
        try:
            await h.to_head()
            assert proxy.count("rate_limit", "eth_getLogs") == 8
            observed = spans(proxy)
            assert len(observed) >= 8 + 4
            body = observed[:-1]  # the last query is clipped at the head
            assert all(a <= b for a, b in itertools.pairwise(body)), observed
            assert body.count(10) >= 4, observed
            assert h.indexer.policy.size >= 10
        finally:
            await h.close()


async def test_when_only_the_leading_endpoint_has_the_head_and_it_fails_the_rest_is_followed(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """The endpoint ahead answers no blocks for a while, the other lags 3 blocks: each step
    still indexes what the lagging one has, then the head once the leader recovers."""
    await asyncio.to_thread(bulk_events, anvil.url, deployed, 12, 2)
    with RpcProxy(anvil.url) as leader, RpcProxy(anvil.url) as lagging:
        lagging.rules.lag = 3
        cfg = write_config(
            tmp_path, "outage", [leader.url, lagging.url], deployed, finality="confirmations",
            confirmations=6, request_timeout=1.0,
        )  # fmt: skip
        h = Harness(cfg)
        try:
            await h.to_head()  # a realtime window to follow from
            await asyncio.to_thread(bulk_events, anvil.url, deployed, 6, 2)
            top = int(await asyncio.to_thread(rpc_call, anvil.url, "eth_blockNumber"), 16)
            leader.rules.on("eth_getBlockByNumber", garbage=1000)  # out for blocks
            for _ in range(3):
                await h.step()  # never raises: what the lagging endpoint has is enough
            assert h.indexer.start_cursor() == top - 3
            leader.rules.clear()
            await h.step()
            assert h.indexer.start_cursor() == top
            fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
            try:
                assert table_diff(h.dump(), fresh.dump()) == ""
            finally:
                await fresh.close()
        finally:
            await h.close()


async def test_a_number_past_64_bits_is_refused_and_the_index_converges(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """Headers timed at 2**64 - 1 (a spec's uint64, but past what any chain reaches and
    what the store's integers hold; it failed the commit and ended the daemon) are refused
    as a bad answer and asked again; the index is the clean one."""
    await run_traffic(traffic(anvil.url, deployed), 4)
    rules = ProxyRules()
    rules.on("eth_getBlockByNumber", huge_quantity=3)
    async with proxied_index(tmp_path, "huge", anvil.url, deployed, rules) as (h, proxy):
        assert proxy.count("huge_quantity") == 3
        fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
        try:
            assert table_diff(h.dump(), fresh.dump()) == ""
        finally:
            await fresh.close()
