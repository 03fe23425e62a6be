"""The backfill benchmarks' workload (bench/escrow_workload.py) on a real anvil: job
lifecycles through the escrow, spread over transactions and blocks, with real descriptions."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from bench.backfill import check_descriptions
from bench.escrow_workload import (
    ANVIL_ARGS,
    DENSE,
    EVENTS_PER_JOB,
    LOGS_PER_RANGE,
    SPARSE_BLOCKS,
    TX_GAS_CAP,
    Density,
    Workload,
    deploy_driver,
    description,
    indexed_events,
    job_flows,
    pick_density,
    sparse,
)
from keeper.devnet.anvil import AnvilProcess, rpc_call
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.store.index_rows import description_json

COMPLETED = 3


@pytest.fixture(scope="module")
def chain() -> Iterator[tuple[str, Deployment]]:
    with AnvilProcess(extra_args=ANVIL_ARGS) as node:
        yield node.url, deploy_all(node.url)


def _blocks_of(logs: list[dict[str, Any]], signature: str) -> dict[int, int]:
    """job id -> block number of its ``signature`` event."""
    topic = "0x" + Web3.keccak(text=signature).hex().removeprefix("0x")
    return {
        int(lg["topics"][1], 16): int(lg["blockNumber"], 16)
        for lg in logs
        if lg["topics"][0] == topic
    }


def test_descriptions_are_realistic_and_distinct() -> None:
    texts = [description(j) for j in range(1, 20_001)]
    assert all(40 <= len(t.encode()) <= 160 for t in texts)
    assert len(set(texts)) == len(texts)
    assert min(len(t) for t in texts) < 70 < max(len(t) for t in texts)


def test_densities_fit_the_limits() -> None:
    """Every dense transaction fits under the Osaka cap and every getLogs range under the
    hosted providers' answer caps; the sparse density spreads a size over its blocks."""
    assert DENSE.gas_per_tx <= TX_GAS_CAP
    assert DENSE.events_per_block >= 3_000
    assert DENSE.max_range * DENSE.events_per_block <= LOGS_PER_RANGE
    assert sparse(20_000).events_per_block == 16
    assert -(-20_000 // sparse(20_000).events_per_block) <= SPARSE_BLOCKS
    assert pick_density("sparse", 40_000).jobs_per_tx == 4
    with pytest.raises(ValueError, match="40 jobs a transaction need more than"):
        _ = Density("big", jobs_per_tx=40, txs_per_block=1).gas_per_tx
    with pytest.raises(ValueError, match="unknown density 'thin'"):
        pick_density("thin", 1)


def test_job_flows_spread_lifecycles_over_blocks(chain: tuple[str, Deployment]) -> None:
    url, d = chain
    driver = deploy_driver(url, d)
    density = Density("test", jobs_per_tx=3, txs_per_block=2)
    wl = job_flows(url, d, driver, 10 * EVENTS_PER_JOB - 5, density)  # rounded up to 10 jobs
    assert (wl.events, wl.jobs, wl.transactions) == (80, 10, 4 + 4)  # 4 waves + 4 to finish
    logs = rpc_call(url, "eth_getLogs", [{"address": d.erc8183, "fromBlock": hex(wl.first_block),
                                          "toBlock": hex(wl.last_block)}])  # fmt: skip
    assert len(logs) == wl.events
    per_block = Counter(int(lg["blockNumber"], 16) for lg in logs)
    assert len(per_block) == wl.blocks == 4  # 8 transactions, two a block
    assert max(per_block.values()) <= density.events_per_block
    created = _blocks_of(logs, "JobCreated(uint256,address,address,address,uint48,address)")
    completed = _blocks_of(logs, "JobCompleted(uint256,address,bytes32)")
    assert sorted(created) == sorted(completed) == list(range(wl.first_job, wl.first_job + 10))
    assert all(completed[j] > created[j] for j in created)  # every lifecycle spans blocks
    escrow = Web3(Web3.HTTPProvider(url)).eth.contract(
        address=Web3.to_checksum_address(d.erc8183), abi=load_abi("ERC8183")
    )
    for job_id in created:
        job = escrow.functions.getJob(job_id).call(block_identifier=created[job_id])
        assert job[10] == description(job_id)  # answers at the creating block, as reads ask
        assert escrow.functions.getJob(job_id).call()[1] == COMPLETED
    # a second run continues the escrow's ids
    again = job_flows(url, d, driver, EVENTS_PER_JOB, density)
    assert again.first_job == wl.first_job + 10 and again.events == EVENTS_PER_JOB
    # a backfill from the deployment also finds the escrow's two settings events (the
    # payment token allowed, the hook whitelisted), and the first run's before the second
    assert indexed_events(url, d, wl) == 80 + 2
    assert indexed_events(url, d, again) == EVENTS_PER_JOB + 80 + 2


def test_the_backfill_benchmark_fails_on_a_missing_description(tmp_path: Path) -> None:
    """A job stored without the description the workload created (a dropped or failed
    read) fails the benchmark, naming the job; all of them stored passes."""
    db = tmp_path / "keeper.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE jobs (job_id TEXT, description TEXT)")
    kept = [(str(j), description_json(description(j))) for j in (7, 8)]  # as the store keeps it
    conn.executemany("INSERT INTO jobs VALUES (?, ?)", kept)
    conn.execute("INSERT INTO jobs VALUES ('9', NULL)")
    conn.commit()
    wl = Workload("dense", 24, 3, 7, 1, 1, 1, 0, 0.0)
    with pytest.raises(RuntimeError, match="stored 2 of 3 job descriptions; job 9 has None"):
        check_descriptions(db, wl)
    conn.execute(
        "UPDATE jobs SET description = ? WHERE job_id = '9'", (description_json(description(9)),)
    )
    conn.commit()
    conn.close()
    assert check_descriptions(db, wl) == 3
