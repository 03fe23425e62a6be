"""CPU cost per event of each backfill stage, each measured alone (``python -m bench.costs``).

The stage profile (``bench.profile --stages``) shows where a backfill spends
its time, but its stages overlap (the pipeline fetches while it commits).
Here every stage runs by itself on the same real getLogs answer from anvil
(the dense honest workload, ``bench/escrow_workload.py``) and on the real
``getJob`` answers of its jobs,
so the figures add up: their sum is the CPU one event costs the indexing
process, and 1 / sum the most events a second one Python process can index
whatever the pipeline does. The reply is read as the client reads it, by the
native scanner (keeper/rpc/logs_reply.py); the rows starting with "..." (the
generic path's ``json.loads`` and ``validate_logs`` beside it, the getJob decoding
alone) are left out of the sum. The pickle rows price the alternative of parsing
in a second process: what the indexing process would pay to receive the
parsed logs or events instead of parsing them itself.
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ARCHIVE_ANVIL
from bench.escrow_workload import ANVIL_ARGS, DENSE, canonical_multicall, deploy_driver, job_flows
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, Event, Protocol
from keeper.domain.multicall import MULTICALL3_ADDRESS, decode_aggregate3, encode_aggregate3
from keeper.domain.views import decode_view, encode_view
from keeper.process_tuning import tune_process
from keeper.rpc.logs_reply import scan_logs_reply
from keeper.rpc.validate import data, validate_logs
from keeper.store.db import connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.migrations import migrate
from keeper.sync.view_calls import AGGREGATE_SIZE

ROUNDS = 3
MAX_RANGE = DENSE.max_range


def per_event(fn: Callable[[], Any], events: int, rounds: int = ROUNDS) -> float:
    """Best of ``rounds``, in CPU microseconds per event (best: the least disturbed run)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best / events * 1e6


def _apply_all(events: list[Event]) -> None:
    """Commit the events in MAX_RANGE-block batches into a fresh database, as a backfill does."""
    by_block: dict[int, list[Event]] = {}
    for e in events:
        by_block.setdefault(e.log.block_number, []).append(e)
    numbers = sorted(by_block)
    with tempfile.TemporaryDirectory(prefix="bench-costs-") as tmp:
        conn = connect(Path(tmp) / "keeper.db")
        migrate(conn)
        store = IndexStore(conn, 31337)
        for i in range(0, len(numbers), MAX_RANGE):
            chunk = numbers[i : i + MAX_RANGE]
            top = by_block[chunk[-1]][0].log
            anchor = BlockHeader(top.block_number, top.block_hash, "0x" + "00" * 32, 1)
            batch = [e for n in chunk for e in by_block[n]]
            store.apply_batch(Batch(batch, [anchor], [], anchor.number, anchor.hash, anchor.number))
        conn.close()


def _post(url: str, body: list[dict[str, Any]] | dict[str, Any]) -> bytes:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as resp:
        return bytes(resp.read())


def _get_jobs(url: str, escrow: str, events: list[Event]) -> list[bytes]:
    """The raw getJob answer of every JobCreated, read at its block as the indexer does."""
    calls = [
        {"jsonrpc": "2.0", "id": i, "method": "eth_call",
         "params": [{"to": escrow, "data": "0x" + encode_view("getJob", e.subject or "").hex()},
                    hex(e.log.block_number)]}
        for i, e in enumerate(x for x in events if x.name == "JobCreated")
    ]  # fmt: skip
    out: list[bytes] = []
    for i in range(0, len(calls), 500):
        replies = sorted(json.loads(_post(url, calls[i : i + 500])), key=lambda r: r["id"])
        out += [bytes.fromhex(r["result"][2:]) for r in replies]
    return out


def _aggregates(url: str, escrow: str, events: list[Event]) -> list[str]:
    """The raw hex answers of every JobCreated's getJob grouped as the indexer sends them:
    aggregate3 calls of AGGREGATE_SIZE at one block (the head here)."""
    jobs = [e for e in events if e.name == "JobCreated"]
    payloads = [
        encode_aggregate3([(escrow, encode_view("getJob", e.subject or ""))
                           for e in jobs[i : i + AGGREGATE_SIZE]])
        for i in range(0, len(jobs), AGGREGATE_SIZE)
    ]  # fmt: skip
    calls = [
        {"jsonrpc": "2.0", "id": i, "method": "eth_call",
         "params": [{"to": MULTICALL3_ADDRESS, "data": "0x" + p.hex()}, "latest"]}
        for i, p in enumerate(payloads)
    ]  # fmt: skip
    replies = [json.loads(_post(url, [call]))[0] for call in calls]
    if any("result" not in r for r in replies):
        raise RuntimeError(f"an aggregate3 read failed: {replies[0]}")
    return [str(r["result"]) for r in replies]


def _read_grouped(answers: list[str]) -> None:
    """What the indexer does with grouped answers: check the hex, split, decode each."""
    for raw in answers:
        for result in decode_aggregate3(data(raw, "aggregate3 call")):
            decode_view("getJob", result.return_data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("events", type=int, nargs="?", default=60_000)
    args = parser.parse_args()
    tune_process()  # as the daemon and `keeper backfill` run
    with AnvilProcess(extra_args=ARCHIVE_ANVIL + ANVIL_ARGS) as node:
        d = deploy_all(node.url)
        canonical_multicall(node.url, d)
        job_flows(node.url, d, deploy_driver(node.url, d), args.events, DENSE)
        query = {"address": [d.erc8183], "fromBlock": "0x0", "toBlock": "latest"}
        call = {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [query]}
        raw = _post(node.url, call)
        result = json.loads(raw)["result"]
        n = len(result)
        logs = validate_logs(result, addresses=[d.erc8183])
        protocols = {d.erc8183.lower(): Protocol.ERC8183}
        times = {lg.block_number: 1 for lg in logs}
        events = decode_logs(logs, protocols, times)
        answers = _get_jobs(node.url, d.erc8183, events)
        grouped = _aggregates(node.url, d.erc8183, events)
    if scan_logs_reply(raw, 1, addresses=[d.erc8183]) != logs:
        raise RuntimeError("the native scanner is not built, or disagrees with validate_logs")
    rows: list[tuple[str, float]] = [
        ("the getLogs reply scanned natively",
         per_event(lambda: scan_logs_reply(raw, 1, addresses=[d.erc8183]), n)),
        ("... generic: json.loads of the body", per_event(lambda: json.loads(raw), n)),
        ("... generic: validate_logs",
         per_event(lambda: validate_logs(result, addresses=[d.erc8183]), n)),
        ("decode_logs", per_event(lambda: decode_logs(logs, protocols, times), n)),
        (f"... decode_view of {len(answers):,} getJob answers alone",
         per_event(lambda: [decode_view("getJob", a) for a in answers], n)),
        (f"the same from {len(grouped)} aggregate3 answers",
         per_event(lambda: _read_grouped(grouped), n)),
        ("apply_batch (SQLite, projections)", per_event(lambda: _apply_all(events), n)),
    ]  # fmt: skip
    pickled_logs, pickled_events = pickle.dumps(logs, 5), pickle.dumps(events, 5)
    shipping = [
        ("pickle.loads of parsed logs", per_event(lambda: pickle.loads(pickled_logs), n)),
        ("pickle.loads of decoded events", per_event(lambda: pickle.loads(pickled_events), n)),
    ]
    total = sum(cost for name, cost in rows if not name.startswith("..."))
    print(f"{n:,} events, {len(raw) / n:.0f} bytes of JSON each; CPU us per event:")
    for name, cost in rows:
        print(f"  {name:<40} {cost:6.2f}")
    print(f"  {'sum':<40} {total:6.2f}  -> at most {1e6 / total:,.0f} ev/s on one core")
    print("receiving parsed data from a second process instead:")
    for name, cost in shipping:
        print(f"  {name:<40} {cost:6.2f}")


if __name__ == "__main__":
    main()
