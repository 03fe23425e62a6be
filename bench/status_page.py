"""Benchmark 6: the status page with pictures on a database of a million events.

The workload is 30 days of ERC-8183 job lifecycles (created, budget set,
funded, submitted, then completed and paid, rejected and refunded, expired and
refunded, or still held), ABI-encoded like the chain's logs, decoded by the
real decoder and committed with ``IndexStore.apply_batch`` (the indexer's own
commit), plus a keeper intent per expired job and a verification per verdict.

Figures: ``GET /?range=hour|day|week`` over HTTP (median of several loads)
and, beside them, measured in the same run on the same database, the page's
tables alone (the status page before it had pictures: sync state, counts,
escrow sums, recent verdicts), read in process.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from eth_abi.abi import encode
from eth_utils.crypto import keccak
from prometheus_client import CollectorRegistry

from bench.common import Result
from keeper.api.app import make_app
from keeper.api.overview import RANGES, read_overview
from keeper.api.reads import ApiReads
from keeper.devnet.anvil import free_port
from keeper.domain.event_catalog import spec_for
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, ChainRead, Log, Protocol
from keeper.domain.planner import Action, ActionKind, PlannerConfig
from keeper.domain.reads import reads_for
from keeper.store import verifications as vstore
from keeper.store.db import connect, refresh_statistics
from keeper.store.index_store import Batch, IndexStore
from keeper.store.intents import IntentStore
from keeper.store.migrations import migrate
from keeper.store.tokens import TokenMeta, save_token_meta

CHAIN_ID = 31337
ACP = "0x" + "a1" * 20
USDC = "0x" + "70" * 20
PEOPLE = ("0x" + "c1" * 20, "0x" + "d1" * 20, "0x" + "e1" * 20)
HEAD_TS = 1_700_000_000
DAYS = 30
EVENTS_PER_JOB = 6
EXPIRY = 3 * 86400
LOADS = 5
PAGE_TARGET_MS = 500.0


def _topic(typ: str, value: Any) -> str:
    return "0x" + encode([typ], [value]).hex()


def _log(name: str, values: dict[str, Any], block: BlockHeader, index: int) -> Log:
    spec = spec_for(name)
    topics = [spec.topic0]
    types: list[str] = []
    plain: list[Any] = []
    for arg, typ, indexed in spec.inputs:
        v = values[arg]
        if typ == "bytes32" and isinstance(v, str):
            v = bytes.fromhex(v[2:])
        if indexed:
            topics.append(_topic(typ, v))
        else:
            types.append(typ)
            plain.append(v)
    tx = "0x" + keccak(text=f"{block.hash}:{index}").hex()
    return Log(ACP, tuple(topics), encode(types, plain), block.number, block.hash, tx, index, index)


def _steps(job: int, created: int) -> list[tuple[int, int, str]]:
    """(time, job, step) of one job's lifecycle; its shape is chosen by the job id.

    Every job expires three days after creation: the last three days' expiring
    jobs are the deadlines ahead.
    """
    out = [(created, job, "open"), (created + 7200, job, "submit")]
    shape = job % 10
    if shape < 7:
        out.append((created + 4 * 3600, job, "complete"))
    elif shape < 9:
        out.append((created + 4 * 3600, job, "reject"))
    else:
        out.append((created + EXPIRY, job, "expire"))
    return [s for s in out if s[0] <= HEAD_TS]


def _events(job: int, step: str, ts: int) -> list[tuple[str, dict[str, Any]]]:
    client, provider, evaluator = PEOPLE
    reason = "0x" + keccak(text=f"reason {job}").hex()
    amount = 10**6 * (1 + job % 50)
    if step == "open":
        return [
            ("JobCreated", {"jobId": job, "client": client, "provider": provider,
                            "evaluator": evaluator, "expiredAt": ts + EXPIRY,
                            "hook": "0x" + "00" * 20}),
            ("BudgetSet", {"jobId": job, "token": USDC, "amount": amount}),
            ("JobFunded", {"jobId": job, "client": client, "amount": amount}),
        ]  # fmt: skip
    if step == "submit":
        return [("JobSubmitted", {"jobId": job, "provider": provider, "deliverable": reason})]
    if step == "complete":
        return [
            ("JobCompleted", {"jobId": job, "evaluator": evaluator, "reason": reason}),
            ("PaymentReleased", {"jobId": job, "provider": provider, "amount": amount}),
        ]
    if step == "reject":
        return [
            ("JobRejected", {"jobId": job, "rejector": evaluator, "reason": reason}),
            ("Refunded", {"jobId": job, "client": client, "amount": amount}),
        ]
    return [("JobExpired", {"jobId": job}), ("Refunded", {"jobId": job, "client": client,
                                                          "amount": amount})]  # fmt: skip


def build_database(path: Path, events: int) -> dict[str, int]:
    """Write about ``events`` events over the last DAYS days; returns what was written."""
    jobs = events // EVENTS_PER_JOB
    start = HEAD_TS - DAYS * 86400
    steps = sorted(
        s for j in range(1, jobs + 1) for s in _steps(j, start + (j * DAYS * 86400) // jobs)
    )
    conn = connect(path)
    migrate(conn)
    store = IndexStore(conn, CHAIN_ID)
    intents = IntentStore(conn, CHAIN_ID)
    written = 0
    parent = "0x" + "00" * 32
    number = 0
    chunk: list[tuple[int, int, str]] = []
    verdicts: list[Any] = []
    expired: list[Action] = []

    def commit(chunk: list[tuple[int, int, str]]) -> None:
        nonlocal parent, number, written
        logs: list[Log] = []
        blocks: list[BlockHeader] = []
        for ts, job, step in chunk:
            if not blocks or blocks[-1].timestamp != ts:
                number += 1
                h = "0x" + keccak(text=f"bench-block:{number}").hex()
                blocks.append(BlockHeader(number, h, parent, ts))
                parent = h
            block = blocks[-1]
            base = sum(1 for lg in logs[-8:] if lg.block_number == block.number)
            for i, (name, values) in enumerate(_events(job, step, ts)):
                logs.append(_log(name, values, block, base + i))
            if step == "expire":
                expired.append(Action(ACP, str(job), ActionKind.CLAIM_REFUND, ts, Protocol.ERC8183))
        decoded = decode_logs(
            logs, {ACP: Protocol.ERC8183}, {b.number: b.timestamp for b in blocks}
        )
        reads = [
            ChainRead(r.contract, r.subject, r.kind, r.block_number, r.block_hash,
                      {"description": "bench"})
            for e in decoded for r in reads_for(e)
        ]  # fmt: skip
        verdicts.extend(e for e in decoded if e.name in ("JobCompleted", "JobRejected"))
        store.apply_batch(Batch(decoded, blocks, reads, number, parent, number))
        written += len(decoded)

    for s in steps:
        chunk.append(s)
        if len(chunk) >= 4000:
            commit(chunk)
            chunk = []
    if chunk:
        commit(chunk)
    save_token_meta(conn, CHAIN_ID, TokenMeta(USDC, 6, "USDC"), number)
    for i in range(0, len(expired), 1000):
        done = intents.open_decisions(expired[i : i + 1000], number, parent)
        intents.set_outcome([d.id for d in done], "confirmed", status="done")
    conn.execute("BEGIN")  # one transaction: the verify store joins it
    for e in verdicts:
        status = "verified" if int(e.subject) % 13 else "mismatch"
        vstore.save_verification(
            conn,
            vstore.VerificationRow(
                CHAIN_ID, ACP, e.subject, status, "[]", None, "{}", "0x" + "ab" * 32, None, 1,
                e.name, e.log.tx_hash, e.log.block_hash, e.log.block_number, e.log.log_index, 1,
                HEAD_TS, None,
            ),
            new_revision=True,
        )  # fmt: skip
    conn.execute("COMMIT")
    refresh_statistics(conn)
    conn.close()
    return {"events": written, "jobs": jobs, "blocks": number, "verdicts": len(verdicts)}


async def _page_ms(url: str) -> list[float]:
    out = []
    async with aiohttp.ClientSession() as session:
        for _ in range(LOADS + 1):
            t0 = time.perf_counter()
            async with session.get(url) as response:
                body = await response.text()
                assert response.status == 200 and "<svg" in body, response.status
            out.append((time.perf_counter() - t0) * 1000)
    return out[1:]  # the first load warms the page cache


async def _serve_and_measure(path: Path) -> dict[str, list[float]]:
    app = make_app(path, CollectorRegistry(), dict, contracts={"acp": ACP}, chain_id=CHAIN_ID,
                   db_gauges=False)  # fmt: skip
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        return {r: await _page_ms(f"http://127.0.0.1:{port}/?range={r}") for r in RANGES}
    finally:
        await runner.cleanup()


def _in_process_ms(path: Path) -> dict[str, float]:
    reads = ApiReads(path, CHAIN_ID)
    timings: dict[str, list[float]] = {}
    try:
        for _ in range(LOADS):
            t0 = time.perf_counter()
            reads.status()
            reads.locked()
            reads.recent_verdicts()
            timings.setdefault("tables", []).append((time.perf_counter() - t0) * 1000)
            for r in RANGES:
                t0 = time.perf_counter()
                reads.snapshot(
                    lambda conn, r=r: read_overview(conn, CHAIN_ID, r, PlannerConfig()), None
                )
                timings.setdefault(r, []).append((time.perf_counter() - t0) * 1000)
    finally:
        reads.close()
    return {k: statistics.median(v) for k, v in timings.items()}


def bench_status_page(events: int, mode: str) -> Result:
    result = Result("status_page", mode)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keeper.db"
        t0 = time.perf_counter()
        written = build_database(path, events)
        result.details.update(written, build_seconds=round(time.perf_counter() - t0, 1))
        pages = asyncio.run(_serve_and_measure(path))
        reads = _in_process_ms(path)
    tables = reads["tables"]
    result.add("tables alone (the page before pictures), in process", tables, "ms", higher=False)
    for r in RANGES:
        page = statistics.median(pages[r])
        result.add(f"GET /?range={r}, whole page over HTTP", page, "ms", PAGE_TARGET_MS,
                   higher=False, note=f"p100 {max(pages[r]):.0f} ms")  # fmt: skip
        result.add(f"pictures of the last {r}, in process", reads[r], "ms",
                   note=f"{reads[r] / tables:.1f} x the tables")  # fmt: skip
    return result
