"""CPU cost per event of each backfill stage, each measured alone (``python -m bench.costs``).

The stage profile (``bench.profile --stages``) shows where a backfill spends
its time, but its stages overlap (the pipeline fetches while it commits).
Here every stage runs by itself on the same real getLogs answer from anvil,
so the figures add up: their sum is the CPU one event costs the indexing
process, and 1 / sum the most events a second one Python process can index
whatever the pipeline does. The pickle rows price the alternative of parsing
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

from bench.backfill import JOBS_PER_BLOCK, MAX_RANGE
from bench.workload import job_flows
from keeper.compose import tune_gc
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, Event, Protocol
from keeper.rpc.validate import validate_logs
from keeper.store.db import connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.migrations import migrate

ROUNDS = 3


def _per_event(fn: Callable[[], Any], events: int) -> float:
    """Best of ROUNDS, in CPU microseconds per event (best: the least disturbed run)."""
    best = float("inf")
    for _ in range(ROUNDS):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("events", type=int, nargs="?", default=60_000)
    args = parser.parse_args()
    tune_gc()  # as the daemon and `keeper backfill` run
    with AnvilProcess() as node:
        d = deploy_all(node.url)
        job_flows(node.url, d.emitter, args.events, jobs_per_block=JOBS_PER_BLOCK)
        query = {"address": [d.emitter], "fromBlock": "0x0", "toBlock": "latest"}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [query]})
        request = urllib.request.Request(
            node.url, body.encode(), {"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as resp:
            raw = resp.read()
    result = json.loads(raw)["result"]
    n = len(result)
    logs = validate_logs(result, addresses=[d.emitter])
    protocols = {d.emitter.lower(): Protocol.ERC8183}
    times = {lg.block_number: 1 for lg in logs}
    events = decode_logs(logs, protocols, times)
    rows: list[tuple[str, float]] = [
        ("json.loads of the getLogs body", _per_event(lambda: json.loads(raw), n)),
        ("validate_logs", _per_event(lambda: validate_logs(result, addresses=[d.emitter]), n)),
        ("decode_logs", _per_event(lambda: decode_logs(logs, protocols, times), n)),
        ("apply_batch (SQLite, projections)", _per_event(lambda: _apply_all(events), n)),
    ]
    pickled_logs, pickled_events = pickle.dumps(logs, 5), pickle.dumps(events, 5)
    shipping = [
        ("pickle.loads of parsed logs", _per_event(lambda: pickle.loads(pickled_logs), n)),
        ("pickle.loads of decoded events", _per_event(lambda: pickle.loads(pickled_events), n)),
    ]
    total = sum(cost for _, cost in rows)
    print(f"{n:,} events, {len(raw) / n:.0f} bytes of JSON each; CPU us per event:")
    for name, cost in rows:
        print(f"  {name:<40} {cost:6.2f}")
    print(f"  {'sum':<40} {total:6.2f}  -> at most {1e6 / total:,.0f} ev/s on one core")
    print("receiving parsed data from a second process instead:")
    for name, cost in shipping:
        print(f"  {name:<40} {cost:6.2f}")


if __name__ == "__main__":
    main()
