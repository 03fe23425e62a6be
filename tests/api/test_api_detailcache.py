"""Details kept under their subject's version: never older than the last visible commit.

The API keeps a detail under its subject's version, which every writer of
what the detail shows raises in its own transaction (on SQLite, the whole
detail: keeper.api.detailcache); each lookup checks that version in the
database. These tests warm the kept heads, then
write through every path that changes a detail (a batch, a rollback, a full
rebuild, a keeper intent and its outcome, a verification, a contract-level
pause and its rollback) and check that the very next request shows the change
and is byte for byte the detail built from scratch by the unkept statement.
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
from keeper.api.reads import ApiReads
from keeper.domain.event_catalog import spec_for
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, ChainRead, Log, Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.domain.reads import reads_for
from keeper.store import subjects
from keeper.store import verifications as vstore
from keeper.store.db import Db, connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.intents import IntentStore

Client = TestClient[Any, Any]


def _kept(version: int, head: str) -> Kept:
    return Kept(version, head, digest(head))


def test_least_recently_used_heads_go_first() -> None:
    """Past the bound the head used longest ago is dropped; an oversized one is not kept."""
    cache = DetailCache(max_bytes=10)
    cache.put("a", ("c", "1"), _kept(1, "1234"))
    cache.put("b", ("c", "2"), _kept(1, "5678"))
    assert cache.get("a") == _kept(1, "1234")  # now the most recently used
    cache.put("c", ("c", "3"), _kept(2, "90ab"))
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c")) == (_kept(1, "1234"), _kept(2, "90ab"))
    cache.put("a", ("c", "1"), _kept(3, "xy"))  # a new version replaces the old head
    assert cache.get("a") == _kept(3, "xy")
    cache.put("big", ("c", "4"), _kept(1, "x" * 11))
    assert cache.get("big") is None
    assert cache.get("c") == _kept(2, "90ab")


def test_a_changed_subject_loses_every_key_kept_about_it() -> None:
    """drop_subjects forgets each key of a subject (a detail kept under two contract
    names, say) and nothing of the others; the bytes kept are freed with them."""
    cache = DetailCache(max_bytes=12)
    cache.put(("jobs", "c", "1", "acp"), ("c", "1"), _kept(1, "1234"))
    cache.put(("jobs", "c", "1", None), ("c", "1"), _kept(1, "5678"))
    cache.put(("jobs", "c", "2", "acp"), ("c", "2"), _kept(1, "90ab"))
    cache.drop_subjects([("c", "1"), ("c", "9")])
    assert cache.get(("jobs", "c", "1", "acp")) is None
    assert cache.get(("jobs", "c", "1", None)) is None
    assert cache.get(("jobs", "c", "2", "acp")) == _kept(1, "90ab")
    cache.put(("jobs", "c", "3", "acp"), ("c", "3"), _kept(1, "cdefghij"))  # fits again
    assert cache.get(("jobs", "c", "2", "acp")) == _kept(1, "90ab")
    cache.clear()
    assert cache.get(("jobs", "c", "3", "acp")) is None


def _next_block(
    head: BlockHeader, seed: str, name: str, values: dict[str, Any]
) -> tuple[BlockHeader, list[Any]]:
    """The block after ``head`` holding one ``name`` event of ACP, decoded as the indexer does."""
    number = head.number + 1
    block = BlockHeader(
        number, "0x" + keccak(text=f"{seed}:{number}").hex(), head.hash, head.timestamp + 12
    )
    topics, data = encode_event(spec_for(name), values)
    tx = "0x" + keccak(text=f"{seed}-tx:{number}").hex()
    log = Log(ACP, topics, data, number, block.hash, tx, 0, 0)
    return block, decode_logs([log], PROTOCOLS, {number: block.timestamp})


def _submitted(head: BlockHeader, job_id: str) -> tuple[BlockHeader, list[Any], list[ChainRead]]:
    """The next block, holding JobSubmitted for ``job_id``, and the reads it makes."""
    values = {"jobId": int(job_id), "provider": PROVIDER, "deliverable": "0x" + "ee" * 32}
    block, events = _next_block(head, "cache", "JobSubmitted", values)
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
        assert _version(writer, funded) > before
        changed = await body(c, funded)
        assert '"status":"submitted"' in changed and block.hash in changed
        others = {j: await body(c, j) for j in world.jobs if j != funded}
        assert others == {j: warm[j] for j in others}

        # a rollback to the block before: the event and the read are gone again
        store.rollback_to(world.head.number)
        assert await body(c, funded) == warm[funded]

        # a full rebuild raises every version above the highest before it (commit
        # order); the bodies are the same
        top = int(writer.execute("SELECT max(version) FROM subject_versions").fetchone()[0])
        store.rebuild_all()
        assert all(_version(writer, j) > top for j in world.jobs)
        assert {j: await body(c, j) for j in world.jobs} == warm

        # a keeper intent, then its outcome (the keeper's writes raise the version too)
        action = Action(ACP, funded, ActionKind.CLAIM_REFUND, 0, Protocol.ERC8183)
        intents = IntentStore(writer, CHAIN_ID)
        (intent,) = intents.open_decisions([action], world.head.number, world.head.hash)
        assert '"action":"claimRefund"' in await body(c, funded)
        intents.set_outcome([intent.id], "preempted", status="done", detail="someone else")
        assert '"outcome":"preempted"' in await body(c, funded)

        # the verifier's write: a posted document makes the verification due again
        verified = world.verified_job
        assert '"next_retry_at":null' in await body(c, verified)
        vstore.save_submission(writer, CHAIN_ID, [(ACP, verified)], "0x" + "ab" * 32, b"{}")
        assert '"next_retry_at":0' in await body(c, verified)

        # a contract-level pause, indexed, then rolled back: every job's contract_paused
        # flips and flips back
        block, events = _next_block(world.head, "pause", "Paused", {"account": PROVIDER})
        store.apply_batch(Batch(events, [block], [], block.number, block.hash, block.number))
        paused = {j: await body(c, j) for j in world.jobs}
        assert all('"contract_paused":true' in text for text in paused.values())
        store.rollback_to(world.head.number)
        unpaused = {j: await body(c, j) for j in world.jobs}
        assert all('"contract_paused":false' in text for text in unpaused.values())
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


async def test_a_kept_list_page_shows_every_commit_at_the_next_request(
    world: World, tmp_path: Path
) -> None:
    """Pages are kept under the database's commit header (keeper.api.pagecache): a
    commit by another connection is in the very next page, however often it was asked."""
    copy = tmp_path / "listed.db"
    shutil.copy(world.path, copy)
    writer = connect(copy)
    funded = next(j for j, s in world.jobs.items() if s == "funded" and j != world.intent_job)
    path = "/v1/jobs?contract=acp&status=funded"
    assert world.head is not None

    async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:

        async def listed() -> list[str]:
            response = await c.get(path)
            assert response.status == 200
            return [item["job_id"] for item in (await response.json())["items"]]

        before = [await listed() for _ in range(3)]
        assert before[0] == before[1] == before[2] and funded in before[0]
        block, events, reads = _submitted(world.head, funded)
        IndexStore(writer, CHAIN_ID).apply_batch(
            Batch(events, [block], reads, block.number, block.hash, block.number)
        )
        after = await listed()
        assert funded not in after and set(after) == set(before[0]) - {funded}
    writer.close()


def test_a_detail_asked_for_in_capitals_is_forgotten_when_its_subject_changes(
    world: World, tmp_path: Path
) -> None:
    """The versions name subjects in lower case; a detail kept under an address written
    in capitals is forgotten all the same when its subject's version rises."""
    copy = tmp_path / "capitals.db"
    shutil.copy(world.path, copy)
    writer = connect(copy)
    funded = next(j for j, s in world.jobs.items() if s == "funded" and j != world.intent_job)
    reads = ApiReads(copy, CHAIN_ID, {ACP: "acp"})
    shouted = "0x" + ACP[2:].upper()
    before = reads.tagged_detail("jobs", shouted, funded, "acp")
    assert before is not None and reads.tagged_detail("jobs", shouted, funded, "acp") == before
    assert world.head is not None
    block, events, chain_reads = _submitted(world.head, funded)
    IndexStore(writer, CHAIN_ID).apply_batch(
        Batch(events, [block], chain_reads, block.number, block.hash, block.number)
    )
    after = reads.tagged_detail("jobs", shouted, funded, "acp")
    assert after is not None and after != before and block.hash in after[0]
    reads.close()
    writer.close()
