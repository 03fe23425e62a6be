"""View reads grouped through Multicall3 ``aggregate3`` index exactly what lone eth_calls do.

The same chain (both protocols' traffic, and emitter jobs whose ``getJob``
reverts) is indexed three times: every read alone (no Multicall3 at the
configured address), grouped through the devnet's Multicall3, and grouped
through one deployed only after the traffic, so that the reads made at the
events' own blocks find no Multicall3 there. The three indexes are identical,
reverted reads included, and the grouped one sends far fewer eth_calls.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from support.rpc_proxy import RpcProxy
from sync_support import proxied_index, run_traffic, table_diff, traffic
from test_indexer_crash import bulk_events

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess
from keeper.devnet.deploy import Deployment, connect, deploy_all, deploy_contract


@pytest.fixture
def deployed(anvil: AnvilProcess) -> Deployment:
    return deploy_all(anvil.url)


async def index(
    tmp: Path, name: str, url: str, deployed: Deployment, multicall: str, **chain: Any
) -> tuple[dict[str, list[tuple[Any, ...]]], list[Any]]:
    """A fresh index of the whole chain through a recording proxy: its tables and eth_calls."""
    async with proxied_index(tmp, name, url, deployed, multicall=multicall, **chain) as (h, proxy):
        dump = h.dump()
        # where each read came from (left out of dump(): it depends on the node)
        dump["sources"] = sorted(
            tuple(r)
            for r in h.conn.execute(
                "SELECT contract, subject, kind, block_number, source FROM chain_reads"
            )
        )
        return dump, proxy.requests_for("eth_call")


async def test_grouped_reads_index_what_lone_reads_index(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    await run_traffic(traffic(anvil.url, deployed), 8)
    await asyncio.to_thread(bulk_events, anvil.url, deployed, 4, 5)
    late = await asyncio.to_thread(deploy_contract, connect(anvil.url), DEV_KEYS[0], "Multicall3")

    alone, alone_calls = await index(tmp_path, "alone", anvil.url, deployed, "")
    grouped, grouped_calls = await index(
        tmp_path, "grouped", anvil.url, deployed, deployed.multicall
    )
    later, _ = await index(tmp_path, "late", anvil.url, deployed, late)

    assert table_diff(alone, grouped) == ""
    assert table_diff(alone, later) == ""
    results = [(r, json.loads(str(r[-1]))) for r in grouped["chain_reads"]]
    kinds = {row[3] for row, _ in results}
    assert {"getJob", "getTaskEvaluatorConfig", "getTaskVerdict"} <= kinds, kinds
    # the emitter's jobs have no getJob: reverted inside an aggregate, recorded as a lone call's
    assert any(res.get("error") == "reverted" for _, res in results)
    assert any("description" in res for _, res in results)

    grouped_aggregates = aggregates(grouped_calls, deployed.multicall.lower())
    assert grouped_aggregates, "no read went through Multicall3"
    assert aggregates(alone_calls, deployed.multicall.lower()) == []
    # alone: one eth_call a read. Grouped: the reads of a block in one aggregate; a read
    # that fails inside it (the emitter's 20 reverting getJob) is made again alone, once
    emitter = deployed.emitter.lower()
    lone = [p for p in grouped_calls if p[0]["to"] != deployed.multicall.lower()]
    assert len([p for p in lone if p[0]["to"] == emitter]) == 20
    escrow_reads = [p for p in alone_calls if p[0]["to"] != emitter]
    escrow_lone = [p for p in lone if p[0]["to"] != emitter]
    assert len(escrow_lone) + len(grouped_aggregates) < len(escrow_reads), (
        len(escrow_lone), len(grouped_aggregates), len(escrow_reads),
    )  # fmt: skip


async def test_an_aggregate_the_node_reverts_has_its_reads_made_alone(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """An aggregate that reverts as a whole (a node's gas cap, say) says nothing about its
    reads: each is made alone, and the index is the clean one."""
    await run_traffic(traffic(anvil.url, deployed), 4)
    clean, clean_calls = await index(tmp_path, "clean", anvil.url, deployed, deployed.multicall)
    multicall = deployed.multicall.lower()
    with RpcProxy(anvil.url) as faulty:
        faulty.rules.on(
            "eth_call", error=1, error_code=3, error_message="execution reverted", to=multicall
        )
        dump, calls = await index(tmp_path, "reverted", faulty.url, deployed, deployed.multicall)
        assert faulty.count("error", "eth_call") == 1  # the first aggregate
    # its reads were made alone: more lone calls than in the clean run, not another aggregate
    assert len(aggregates(calls, multicall)) == len(aggregates(clean_calls, multicall))
    assert len(calls) > len(clean_calls)
    assert table_diff(clean, dump) == ""


async def test_transient_failures_of_an_aggregate_are_retried(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """An aggregate the node fails transiently is sent again; the index is the clean one."""
    await run_traffic(traffic(anvil.url, deployed), 4)
    clean, clean_calls = await index(tmp_path, "clean", anvil.url, deployed, deployed.multicall)
    multicall = deployed.multicall.lower()
    with RpcProxy(anvil.url) as faulty:
        faulty.rules.on("eth_call", error=3, error_message="header not found", to=multicall)
        dump, calls = await index(tmp_path, "faulty", faulty.url, deployed, deployed.multicall)
        assert faulty.count("error", "eth_call") == 3  # the first three aggregates sent
    # each failed aggregate was sent again
    assert len(aggregates(calls, multicall)) >= len(aggregates(clean_calls, multicall)) + 3
    assert table_diff(clean, dump) == ""


def aggregates(calls: list[Any], multicall: str) -> list[Any]:
    """The eth_calls that went through Multicall3."""
    return [p for p in calls if p[0]["to"] == multicall]
