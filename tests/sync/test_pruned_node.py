"""`keeper backfill` against a node that keeps no historical state (anvil --prune-history).

Every job's description still arrives, read from a later block and recorded with
that block as its source; a read whose fields can change (a task's evaluator
config) cannot be taken from a later block, so it is recorded as missing with the
node's reason, and the backfill still completes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from web3 import Web3

from keeper.api.dbstats import sqlite_sources
from keeper.devnet.anvil import DEV_KEYS, AnvilProcess
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import (
    EVALUATOR_FEE_BPS,
    PLATFORM_FEE_BPS,
    TASK_PLATFORM_FEE_BPS,
    connect,
    deploy_contract,
    send_call,
)
from keeper.domain.model import Protocol
from keeper.obs.dbgauges import DatabaseCollector
from keeper.store.db import connect as connect_db
from keeper.store.subjects import detail

KEEPER = [sys.executable, "-m", "keeper"]
PRUNE = 16
JOBS = 6
CLIENT, EVALUATOR = DEV_KEYS[1], DEV_KEYS[2]


def pruned_anvil(slots_in_an_epoch: int) -> Iterator[AnvilProcess]:
    node = AnvilProcess(
        slots_in_an_epoch=slots_in_an_epoch, extra_args=["--prune-history", str(PRUNE)]
    ).start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(params=[4, 12], ids=["finalized-state-kept", "finalized-state-pruned"])
def node(request: pytest.FixtureRequest) -> Iterator[AnvilProcess]:
    """anvil's finalized tag is two epochs below the head: 8 blocks (its state is
    kept) or 24 blocks (pruned too, so only the head has state)."""
    yield from pruned_anvil(int(request.param))


def address_of(key: str) -> str:
    return str(Web3().eth.account.from_key(key).address)


def create_jobs(w3: Web3, commerce: str) -> dict[str, str]:
    """Jobs with distinct descriptions, one block each; job id -> description."""
    c = w3.eth.contract(address=Web3.to_checksum_address(commerce), abi=load_abi("AgenticCommerce"))
    evaluator = Web3.to_checksum_address(address_of(EVALUATOR))
    expiry = int(w3.eth.get_block("latest")["timestamp"]) + 86_400
    out = {}
    for i in range(JOBS):
        text = json.dumps({"brief": f"job {i}", "n": "é" * i})
        fn = c.functions.createJob("0x" + "00" * 20, evaluator, expiry, text, "0x" + "00" * 20, 0)
        send_call(w3, CLIENT, fn)
        out[str(i + 1)] = text
    return out


def mine(w3: Web3, blocks: int) -> None:
    w3.provider.make_request("anvil_mine", [hex(blocks)])  # type: ignore[arg-type]


def write_config(
    tmp: Path,
    node: AnvilProcess,
    contracts: list[tuple[str, str, str, int]],
    *,
    max_range: int = 2000,
    multicall: str = "",
) -> Path:
    blocks = "\n".join(
        f'[[contracts]]\nname = "{n}"\nprotocol = "{p}"\naddress = "{a}"\nstart_block = {b}\n'
        for n, p, a, b in contracts
    )
    path = tmp / "pruned.toml"
    path.write_text(
        f"[chain]\nchain_id = {node.chain_id}\nrpc_urls = [{json.dumps(node.url)}]\n"
        f"max_range = {max_range}\n\n"
        f"[database]\npath = {json.dumps(str(tmp / 'pruned.db'))}\n\n"
        f"[api]\nenabled = false\n\n[keeper]\nmulticall = {json.dumps(multicall)}\n\n{blocks}"
    )
    return path


def backfill(config: Path, tmp: Path, *, fetch_process: bool = False) -> list[dict[str, Any]]:
    """The daemon's own backfill command, as an operator runs it; its JSON log records
    (``fetch_process``: the fetching done by its child process, whose records these are)."""
    env = dict(os.environ, KEEPER_LOG__FORMAT="json")
    # the whole range through the child from its first block, or none of it
    env["KEEPER_CHAIN__FETCH_PROCESS_BLOCKS"] = "1" if fetch_process else "0"
    env["KEEPER_CHAIN__FETCH_PROCESS_EVENTS"] = "0"
    proc = subprocess.run(
        [*KEEPER, "backfill", "--config", str(config), "--no-progress"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    records: list[dict[str, Any]] = []
    for line in proc.stderr.decode().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("grouped", "fetch_process"),
    [(True, False), (False, False), (True, True)],
    ids=["multicall", "alone", "multicall-fetch-process"],
)
def test_every_description_arrives_from_a_later_block(
    node: AnvilProcess, tmp_path: Path, grouped: bool, fetch_process: bool
) -> None:
    """Jobs created far below the pruning horizon: the backfill completes, every description
    is in the index, and each read names the block whose state answered it; the same
    whether the reads are grouped through Multicall3 (the aggregate the node has no
    state for moves to the head as a whole) or made alone, and whether a fetch process
    makes them."""
    w3 = connect(node.url)
    multicall = deploy_contract(w3, DEV_KEYS[0], "Multicall3") if grouped else ""
    start = int(w3.eth.block_number) + 1
    treasury = address_of(DEV_KEYS[-1])
    commerce = deploy_contract(
        w3, DEV_KEYS[0], "AgenticCommerce", treasury, PLATFORM_FEE_BPS, EVALUATOR_FEE_BPS
    )
    descriptions = create_jobs(w3, commerce)
    created = int(w3.eth.block_number)
    mine(w3, 3 * PRUNE)
    # the node really has no state where the jobs were created
    with pytest.raises(Exception, match="BlockOutOfRangeError"):
        w3.eth.call({"to": Web3.to_checksum_address(commerce), "data": "0x"}, created)

    # two blocks per range: the jobs' reads arrive over three batches
    config = write_config(
        tmp_path, node, [("commerce", "erc8183", commerce, start)], max_range=2,
        multicall=multicall,
    )  # fmt: skip
    logs = backfill(config, tmp_path, fetch_process=fetch_process)
    started = [r for r in logs if r.get("event") == "fetch_process_started"]
    assert len(started) == (1 if fetch_process else 0), started

    db = tmp_path / "pruned.db"
    jobs = dict(rows(db, "SELECT job_id, json_extract(description, '$') FROM jobs"))
    assert jobs == descriptions
    head = int(w3.eth.block_number)
    sources = {s for (s,) in rows(db, "SELECT source FROM chain_reads WHERE kind = 'getJob'")}
    assert len(sources) == 1, sources
    (source,) = sources
    where, _, number = source.rpartition(" ")
    # the finalized block when its state is kept, else the head; never a pruned block
    assert where in ("finalized block", "head block")
    assert head - PRUNE < int(number) <= head
    stateless = [r for r in logs if r.get("event") == "reads_without_state"]
    if node.slots_in_an_epoch * 2 > PRUNE:
        assert where == "head block"
        # only the first batch asks the finalized block: later ones go to the head at once
        assert len(stateless) == 1 and stateless[0]["finalized_state"] is False, stateless
    else:
        assert where == "finalized block"
        assert stateless == []
    # a later block's answer keeps only fields that cannot have changed since the event
    results = [json.loads(r) for (r,) in rows(db, "SELECT result_json FROM chain_reads")]
    assert all("status" not in r and "budget" not in r for r in results)
    conn = connect_db(db, readonly=True)
    try:
        text = detail(conn, "jobs", commerce, "1", chain_id=node.chain_id)
    finally:
        conn.close()
    assert text is not None
    assert [(r["kind"], r["source"]) for r in json.loads(text)["reads"]] == [("getJob", source)]


def with_a_token(w3: Web3, name: str, *args: object) -> tuple[str, str]:
    """A MockUSDC and contract ``name`` paid in it, with the last dev key as its treasury."""
    usdc = deploy_contract(w3, DEV_KEYS[0], "MockUSDC")
    treasury = Web3.to_checksum_address(address_of(DEV_KEYS[-1]))
    return usdc, deploy_contract(
        w3, DEV_KEYS[0], name, Web3.to_checksum_address(usdc), treasury, *args
    )


@pytest.fixture
def plain_pruned() -> Iterator[AnvilProcess]:
    yield from pruned_anvil(4)


def test_a_changing_field_without_state_is_recorded_missing(
    plain_pruned: AnvilProcess, tmp_path: Path
) -> None:
    """An evaluator config may change after the event, so no later block may answer for it:
    it is recorded as missing with the node's reason, counted, and the backfill completes."""
    node = plain_pruned
    w3 = connect(node.url)
    start = int(w3.eth.block_number) + 1
    requester = DEV_KEYS[1]
    usdc, market = with_a_token(
        w3,
        "LegacyTaskMarket",
        TASK_PLATFORM_FEE_BPS,
        False,
    )
    token = w3.eth.contract(address=Web3.to_checksum_address(usdc), abi=load_abi("MockUSDC"))
    tm = w3.eth.contract(address=Web3.to_checksum_address(market), abi=load_abi("LegacyTaskMarket"))
    me = Web3.to_checksum_address(address_of(requester))
    send_call(w3, requester, token.functions.mint(me, 10**9))
    send_call(w3, requester, token.functions.approve(tm.address, 10**9))
    task_id = b"\x07" * 32
    expiry = int(w3.eth.get_block("latest")["timestamp"]) + 86_400
    send_call(w3, requester, tm.functions.createTask(task_id, 10**6, expiry, b"\x00" * 4))
    evaluator = Web3.to_checksum_address(address_of(EVALUATOR))
    send_call(
        w3, requester, tm.functions.assignEvaluator(task_id, evaluator, 0, 500, 3600, 600, me)
    )
    mine(w3, 3 * PRUNE)

    config = write_config(tmp_path, node, [("market", "taskmarket", market, start)])
    backfill(config, tmp_path)

    db = tmp_path / "pruned.db"
    reads = rows(db, "SELECT kind, subject, source, result_json FROM chain_reads")
    assert len(reads) == 1, reads
    kind, subject, source, result_json = reads[0]
    assert (kind, subject, source) == ("getTaskEvaluatorConfig", "0x" + "07" * 32, "missing")
    result = json.loads(result_json)
    assert result["error"] == "state unavailable"
    assert "BlockOutOfRangeError" in result["reason"]
    # the task is still indexed from its events (the evaluator is in EvaluatorAssigned);
    # the windows only the config holds stay unknown rather than guessed
    ((status, evaluator_col, windows),) = rows(
        db, "SELECT status, evaluator, evaluation_window + appeal_window FROM tasks"
    )
    assert (status, evaluator_col, windows) == ("open", evaluator.lower(), 0)
    # operators see it: in the task's API detail ...
    conn = connect_db(db, readonly=True)
    try:
        text = detail(conn, "tasks", market, "0x" + "07" * 32, chain_id=node.chain_id)
    finally:
        conn.close()
    assert text is not None
    (read,) = json.loads(text)["reads"]
    assert read["source"] == "missing" and "BlockOutOfRangeError" in read["missing"]
    # ... and in the gauge the daemon's /metrics computes from the database
    registry = CollectorRegistry()
    registry.register(
        DatabaseCollector(
            sqlite_sources(db, node.chain_id), {market: ("market", Protocol.TASKMARKET)}
        )
    )
    exposition = generate_latest(registry).decode()
    assert 'keeper_chain_reads_missing{contract="market",kind="getTaskEvaluatorConfig"} 1.0' in (
        exposition
    )


def test_a_legacy_escrows_immutable_token_arrives_from_a_later_block(
    plain_pruned: AnvilProcess, tmp_path: Path
) -> None:
    """The legacy dialect's token is an immutable: its jobs' getJob and every legacy
    BudgetSet's paymentToken() are answered from the finalized block, which the node has."""
    node = plain_pruned
    w3 = connect(node.url)
    start = int(w3.eth.block_number) + 1
    usdc, legacy = with_a_token(
        w3,
        "LegacyAgenticCommerce",
        PLATFORM_FEE_BPS,
        EVALUATOR_FEE_BPS,
    )
    c = w3.eth.contract(
        address=Web3.to_checksum_address(legacy), abi=load_abi("LegacyAgenticCommerce")
    )
    evaluator = Web3.to_checksum_address(address_of(EVALUATOR))
    expiry = int(w3.eth.get_block("latest")["timestamp"]) + 86_400
    for i in range(2):
        send_call(w3, CLIENT, c.functions.createJob(evaluator, evaluator, expiry, f"legacy {i}"))
    for amount in (5, 7):  # two BudgetSet blocks: one paymentToken() call answers both
        send_call(w3, CLIENT, c.functions.setBudget(1, amount, b""))
    mine(w3, 3 * PRUNE)

    config = write_config(tmp_path, node, [("legacy", "erc8183", legacy, start)])
    backfill(config, tmp_path)

    db = tmp_path / "pruned.db"
    kept = "SELECT job_id, json_extract(description, '$'), token, budget FROM jobs ORDER BY job_id"
    assert rows(db, kept) == [
        ("1", "legacy 0", usdc, "7"),
        ("2", "legacy 1", usdc, "0"),
    ]
    token_reads = rows(
        db, "SELECT block_number, source, result_json FROM chain_reads WHERE kind = 'paymentToken'"
    )
    assert len({b for b, _, _ in token_reads}) == 2
    assert len({(s, r) for _, s, r in token_reads}) == 1  # one answer, from one block
    assert token_reads[0][1].startswith("finalized block ")
    assert json.loads(token_reads[0][2]) == {"token": usdc}
