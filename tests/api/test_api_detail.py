"""The job and task details: one SQL statement per request, checked against the rows it reads.

The detail's JSON text is built by SQLite in one statement (row, events,
intents, pause state, verification). These tests rebuild each detail in
Python from the tables themselves and compare, over every subject of the
world, with a paused contract, and on a database whose keeper and verify
tables were never created (the detail then reads them as empty).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from api_support import build_app
from api_world import ACP, CHAIN_ID, TM, World

from keeper.store import queries
from keeper.store.db import connect
from keeper.store.verifications import get_verification

Client = TestClient[Any, Any]
EVENT_KEYS = ("name", "variant", "block_number", "block_hash", "block_timestamp", "tx_hash",
              "log_index")  # fmt: skip
INTENT_KEYS = ("action", "status", "outcome", "detail", "due_at", "tx_hash", "receipt_block",
               "attempts")  # fmt: skip


async def get_json(client: Client, path: str, status: int = 200) -> Any:
    response = await client.get(path)
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


def _pause(path: Path, contract: str, protocol: str) -> None:
    """A contract-level Paused event, as the indexer stores one."""
    conn = connect(path)
    block = conn.execute("SELECT max(number), max(timestamp) FROM blocks").fetchone()
    conn.execute(
        "INSERT INTO events (chain_id, block_hash, log_index, block_number, block_timestamp,"
        " tx_hash, tx_index, contract, protocol, name, variant, subject, args_json,"
        " topics_json, data_hex) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, 'Paused',"
        " 'v1', NULL, '{}', '[]', '0x')",
        [
            CHAIN_ID,
            "0x" + "ab" * 32,
            999 if protocol == "erc8183" else 998,
            block[0],
            block[1],
            "0x" + "cd" * 32,
            contract,
            protocol,
        ],
    )
    conn.close()


def _expected(conn: sqlite3.Connection, kind: str, item: dict[str, Any]) -> dict[str, Any]:
    """The detail from the tables: the list item's fields, then what only a detail has."""
    contract, subject = item["contract"], item["job_id" if kind == "jobs" else "task_id"]
    events = [
        {k: row[k] for k in EVENT_KEYS} | {"args": json.loads(row["args_json"])}
        for row in conn.execute(
            "SELECT * FROM events WHERE contract = ? AND subject = ? "
            "ORDER BY block_number, log_index",
            [contract, subject],
        )
    ]
    intents = [
        {k: row[k] for k in INTENT_KEYS}
        for row in conn.execute(
            "SELECT * FROM keeper_intents WHERE contract = ? AND subject = ? ORDER BY id",
            [contract, subject],
        )
    ]
    reads = [
        {"kind": row["kind"], "block_number": row["block_number"], "source": row["source"],
         "missing": json.loads(row["result_json"]).get("reason")
         if row["source"] == "missing" else None}
        for row in conn.execute(
            "SELECT * FROM chain_reads WHERE contract = ? AND subject = ? "
            "ORDER BY block_number, kind",
            [contract, subject],
        )
    ]  # fmt: skip
    out = {k: v for k, v in item.items() if k != "contract_name"}
    out |= {"events": events, "reads": reads, "intents": intents}
    paused = queries.pause_state(conn, contract, chain_id=CHAIN_ID)
    out["contract_paused"] = bool(paused and paused[0])
    out["contract_name"] = item["contract_name"]
    if kind == "jobs":
        row = get_verification(conn, CHAIN_ID, contract, subject)
        out["verification"] = None
        if row is not None:
            out["verification"] = {
                "status": row.status, "failures": json.loads(row.failures_json),
                "report_digest": row.report_digest, "document_digest": row.document_digest,
                "revision_count": row.revision_count,
                "event": {"name": row.event_name, "tx_hash": row.tx_hash,
                          "block_number": row.block_number, "log_index": row.log_index},
                "attempts": row.attempts, "next_retry_at": row.next_retry_at,
            }  # fmt: skip
    return out


@pytest.fixture
async def paused(world: World, tmp_path: Path) -> AsyncIterator[tuple[Client, Path]]:
    copy = tmp_path / "paused.db"
    shutil.copy(world.path, copy)
    _pause(copy, ACP, "erc8183")
    _pause(copy, TM, "taskmarket")
    async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:
        yield c, copy


async def test_every_detail_is_its_rows(paused: tuple[Client, Path], world: World) -> None:
    """Each job's and task's detail equals the one rebuilt from its tables, key order too:
    events in chain order, the keeper's intents, the contract paused (the escrow and the
    task market), the verification."""
    client, path = paused
    conn = connect(path, readonly=True)
    seen = {"intents": 0, "verification": 0}
    try:
        for kind, key in (("jobs", "job_id"), ("tasks", "task_id")):
            items = (await get_json(client, f"/v1/{kind}?limit=500"))["items"]
            assert len(items) == len(world.jobs if kind == "jobs" else world.tasks)
            for item in items:
                detail = await get_json(client, f"/v1/{kind}/{item['contract']}/{item[key]}")
                expected = _expected(conn, kind, item)
                assert list(detail) == list(expected)
                assert detail == expected
                assert detail["events"]
                seen["intents"] += bool(detail["intents"])
                seen["verification"] += detail.get("verification") is not None
                assert detail["contract_paused"] is True  # both contracts are paused
    finally:
        conn.close()
    assert seen == {"intents": 1, "verification": 1}, "the world has one of each"


async def test_detail_without_keeper_and_verify_tables(world: World, tmp_path: Path) -> None:
    """On a database the keeper and verifier never migrated, a detail reads their parts as
    empty: the same row and events, no intents, no verification."""
    async with TestClient(TestServer(build_app(world, inline_lookups=True))) as c:
        full = await get_json(c, f"/v1/jobs/acp/{world.intent_job}")
        verified = await get_json(c, f"/v1/jobs/acp/{world.verified_job}")
    assert full["intents"] and verified["verification"] is not None
    copy = tmp_path / "index-only.db"
    shutil.copy(world.path, copy)
    raw = sqlite3.connect(copy)  # foreign keys off: drop the tables as if never created
    tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    dropped = [t for t in tables if t.startswith(("keeper_", "verification", "verdict"))]
    assert {"keeper_intents", "verifications"} <= set(dropped)
    for table in dropped:
        raw.execute(f"DROP TABLE {table}")
    raw.commit()
    raw.close()
    async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:
        bare = await get_json(c, f"/v1/jobs/acp/{world.intent_job}")
        bare_verified = await get_json(c, f"/v1/jobs/acp/{world.verified_job}")
        await get_json(c, "/v1/jobs/acp/999999", 404)
    assert bare == full | {"intents": []}
    assert bare_verified == verified | {"verification": None}


async def test_refundable_amount_is_exact(world: World, tmp_path: Path) -> None:
    """What claimRefund would pay: budget - settled of a funded or submitted job, exact past
    2**64, never negative; nothing for any other status. List and detail agree."""
    copy = tmp_path / "settled.db"
    shutil.copy(world.path, copy)
    funded = sorted(j for j, s in world.jobs.items() if s == "funded")
    submitted = next(j for j, s in world.jobs.items() if s == "submitted")
    done = next(j for j, s in world.jobs.items() if s == "completed")
    big = 2**200 + 7
    rows = {  # job: (budget, settled) -> refundable
        funded[0]: (str(big), "5", str(big - 5)),
        funded[1]: ("100", "300", "0"),
        submitted: (str(big), "0", str(big)),
        done: (str(big), "0", "0"),
    }
    conn = connect(copy)
    for job, (budget, settled, _) in rows.items():
        conn.execute(
            "UPDATE jobs SET budget = ?, settled_amount = ? WHERE job_id = ?",
            [budget, settled, job],
        )
    conn.close()
    async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:
        items = {i["job_id"]: i for i in (await get_json(c, "/v1/jobs?limit=500"))["items"]}
        for job, (budget, settled, refundable) in rows.items():
            detail = await get_json(c, f"/v1/jobs/acp/{job}")
            assert (detail["budget"], detail["settled_amount"]) == (budget, settled)
            assert detail["refundable_amount"] == items[job]["refundable_amount"] == refundable
