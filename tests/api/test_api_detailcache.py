"""Details kept under their subject's version: never older than the last visible commit.

The API keeps a detail's head (row, events, view reads) under the version
the index store raises in the transaction that rewrites it; each lookup
checks that version in the database. These tests warm the kept heads, then
write through every path that changes a detail (a batch, a rollback, a full
rebuild, a keeper intent, a contract-level pause) and check that the very
next request shows the change and is byte for byte the detail built from
scratch by the unkept statement.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from api_support import build_app
from api_world import ACP, CHAIN_ID, PROTOCOLS, PROVIDER, World
from eth_utils.crypto import keccak
from support.abi_events import encode_event

from keeper.api.detailcache import DetailCache, Kept, digest
from keeper.domain.event_catalog import spec_for
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, ChainRead, Log, Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.domain.reads import reads_for
from keeper.store import subjects
from keeper.store.db import Db, connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.intents import IntentStore

Client = TestClient[Any, Any]


def _kept(version: int, head: str) -> Kept:
    return Kept(version, head, digest(head))


def test_least_recently_used_heads_go_first() -> None:
    """Past the bound the head used longest ago is dropped; an oversized one is not kept."""
    cache = DetailCache(max_bytes=10)
    cache.put("a", _kept(1, "1234"))
    cache.put("b", _kept(1, "5678"))
    assert cache.get("a") == _kept(1, "1234")  # now the most recently used
    cache.put("c", _kept(2, "90ab"))
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c")) == (_kept(1, "1234"), _kept(2, "90ab"))
    cache.put("a", _kept(3, "xy"))  # a new version replaces the old head
    assert cache.get("a") == _kept(3, "xy")
    cache.put("big", _kept(1, "x" * 11))
    assert cache.get("big") is None
    assert cache.get("c") == _kept(2, "90ab")


def _submitted(head: BlockHeader, job_id: str) -> tuple[BlockHeader, list[Any], list[ChainRead]]:
    """The next block, holding JobSubmitted for ``job_id``, decoded as the indexer does."""
    number = head.number + 1
    block = BlockHeader(
        number, "0x" + keccak(text=f"cache:{number}").hex(), head.hash, head.timestamp + 12
    )
    values = {"jobId": int(job_id), "provider": PROVIDER, "deliverable": "0x" + "ee" * 32}
    topics, data = encode_event(spec_for("JobSubmitted"), values)
    tx = "0x" + keccak(text=f"cache-tx:{number}").hex()
    log = Log(ACP, topics, data, number, block.hash, tx, 0, 0)
    events = decode_logs([log], PROTOCOLS, {number: block.timestamp})
    reads = [
        ChainRead(r.contract, r.subject, r.kind, r.block_number, r.block_hash,
                  {"description": f"job {job_id}, resubmitted"})
        for e in events for r in reads_for(e)
    ]  # fmt: skip
    return block, events, reads


def _version(conn: Db, job_id: str) -> int:
    row = conn.execute(
        "SELECT version FROM subject_versions WHERE chain_id = ? AND contract = ? AND subject = ?",
        (CHAIN_ID, ACP, job_id),
    ).fetchone()
    return int(row[0])


async def test_every_write_path_shows_at_the_next_request(world: World, tmp_path: Path) -> None:
    copy = tmp_path / "changing.db"
    shutil.copy(world.path, copy)
    writer = connect(copy)
    store = IndexStore(writer, CHAIN_ID)
    funded = next(j for j, s in world.jobs.items() if s == "funded" and j != world.intent_job)
    reader = connect(copy, readonly=True)

    async def body(c: Client, job_id: str) -> str:
        response = await c.get(f"/v1/jobs/acp/{job_id}")
        assert response.status == 200
        text = await response.text()
        fresh = subjects.detail(reader, "jobs", ACP, job_id, chain_id=CHAIN_ID, contract_name="acp")
        assert text == fresh  # byte for byte the detail built from scratch
        return text

    async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:
        warm = {job_id: await body(c, job_id) for job_id in world.jobs}
        assert {job_id: await body(c, job_id) for job_id in world.jobs} == warm

        # a batch: the job's new event, status and view read; the other jobs unchanged
        assert world.head is not None
        before = _version(writer, funded)
        block, events, reads = _submitted(world.head, funded)
        store.apply_batch(Batch(events, [block], reads, block.number, block.hash, block.number))
        assert _version(writer, funded) == before + 1
        changed = await body(c, funded)
        assert '"status":"submitted"' in changed and block.hash in changed
        others = {j: await body(c, j) for j in world.jobs if j != funded}
        assert others == {j: warm[j] for j in others}

        # a rollback to the block before: the event and the read are gone again
        store.rollback_to(world.head.number)
        assert await body(c, funded) == warm[funded]

        # a full rebuild raises every version; the bodies are the same
        store.rebuild_all()
        assert _version(writer, funded) == before + 3
        assert {j: await body(c, j) for j in world.jobs} == warm

        # a keeper intent (the tail, read afresh): shown at once
        action = Action(ACP, funded, ActionKind.CLAIM_REFUND, 0, Protocol.ERC8183)
        IntentStore(writer, CHAIN_ID).open_decisions([action], world.head.number, world.head.hash)
        assert '"action":"claimRefund"' in await body(c, funded)

        # a contract-level pause: every job's contract_paused flips
        writer.execute(
            "INSERT INTO events (chain_id, block_hash, log_index, block_number, "
            "block_timestamp, tx_hash, tx_index, contract, protocol, name, variant, subject, "
            "args_json, topics_json, data_hex) VALUES (?, ?, 999, ?, 0, ?, 0, ?, 'erc8183', "
            "'Paused', 'v1', NULL, '{}', '[]', '0x')",
            (CHAIN_ID, world.head.hash, world.head.number, "0x" + "cd" * 32, ACP),
        )
        writer.commit()
        paused = [await body(c, j) for j in world.jobs]
        assert all('"contract_paused":true' in text for text in paused)
    reader.close()
    writer.close()


async def test_a_detail_is_not_modified_until_it_changes(world: World, tmp_path: Path) -> None:
    """The detail's ETag answers If-None-Match with a bodiless 304 until a write changes
    the detail's head (a batch) or its tail (an intent); then a 200 with a new tag."""
    copy = tmp_path / "tagged.db"
    shutil.copy(world.path, copy)
    writer = connect(copy)
    funded = next(j for j, s in world.jobs.items() if s == "funded" and j != world.intent_job)
    path = f"/v1/jobs/acp/{funded}"
    assert world.head is not None

    async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:

        async def status(held: str) -> tuple[int, str, bytes]:
            response = await c.get(path, headers={"If-None-Match": held})
            return response.status, response.headers["ETag"], await response.read()

        first = await c.get(path)
        tag = first.headers["ETag"]
        assert first.headers["Cache-Control"] == "no-cache" and tag.startswith('"')
        for held in (tag, f'"other", W/{tag}', "*"):
            assert await status(held) == (304, tag, b"")
        assert (await status('"other"'))[0] == 200

        block, events, reads = _submitted(world.head, funded)
        IndexStore(writer, CHAIN_ID).apply_batch(
            Batch(events, [block], reads, block.number, block.hash, block.number)
        )
        code, after_batch, body = await status(tag)
        assert code == 200 and after_batch != tag and block.hash.encode() in body

        action = Action(ACP, funded, ActionKind.CLAIM_REFUND, 0, Protocol.ERC8183)
        IntentStore(writer, CHAIN_ID).open_decisions([action], block.number, block.hash)
        code, after_intent, body = await status(after_batch)
        assert code == 200 and after_intent != after_batch and b"claimRefund" in body
        assert await status(after_intent) == (304, after_intent, b"")
    writer.close()
