"""A real backfill recorded once, then replayed stage by stage (``python -m bench.replay``).

``record FILE [EVENTS] [--density dense|sparse]`` builds the honest workload
(``bench/escrow_workload.py``), keeps its whole getLogs body, runs the
in-process backfill and keeps every batch it committed (events, headers and
the ``getJob`` reads as the daemon made them). ``stages FILE`` replays them:
CPU microseconds per event of ``json.loads``, ``validate_logs``,
``decode_logs`` and ``apply_batch`` (best of ``--rounds``), then
``apply_batch`` once more with each SQL statement timed. Unlike
``bench.costs`` the store gets the reads and the batch bounds a real backfill
has, and no node runs while it measures, so two trees can be alternated on
one recording (the file holds plain values, not this tree's classes).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pickle
import sqlite3
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.costs import per_event
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, ChainRead, Event, Log, Protocol
from keeper.process_tuning import tune_process
from keeper.rpc.validate import validate_logs
from keeper.store.db import connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.migrations import migrate


def _plain(batch: Batch) -> tuple[Any, ...]:
    events = [
        (e.contract, e.protocol.value, e.name, e.variant, e.subject, dict(e.args),
         dataclasses.astuple(e.log), e.block_timestamp)
        for e in batch.events
    ]  # fmt: skip
    reads = [
        (r.contract, r.subject, r.kind, r.block_number, r.block_hash, dict(r.result), r.source)
        for r in batch.reads
    ]
    blocks = [dataclasses.astuple(h) for h in batch.blocks]
    return events, blocks, reads, batch.indexed_block, batch.indexed_hash, batch.finalized_block


def _batch(plain: tuple[Any, ...]) -> Batch:
    events, blocks, reads, indexed, indexed_hash, finalized = plain
    return Batch(
        [Event(c, Protocol(p), n, v, s, a, Log(*lg), ts) for c, p, n, v, s, a, lg, ts in events],
        [BlockHeader(*h) for h in blocks],
        [ChainRead(*r) for r in reads],
        indexed,
        indexed_hash,
        finalized,
    )


def record(path: Path, events: int, density_name: str) -> None:
    from bench.backfill import CONTRACT_NAME
    from bench.common import ARCHIVE_ANVIL, write_config
    from bench.costs import _post
    from bench.escrow_workload import (
        ANVIL_ARGS,
        canonical_multicall,
        deploy_driver,
        job_flows,
        pick_density,
    )
    from keeper import app
    from keeper.devnet.anvil import AnvilProcess
    from keeper.devnet.deploy import deploy_all

    density = pick_density(density_name, events)
    batches: list[tuple[Any, ...]] = []
    apply = IndexStore.apply_batch

    def recording(self: IndexStore, batch: Batch, **kw: Any) -> Any:
        batches.append(_plain(batch))
        return apply(self, batch, **kw)

    IndexStore.apply_batch = recording  # type: ignore[method-assign]
    with AnvilProcess(extra_args=ARCHIVE_ANVIL + ANVIL_ARGS) as node, \
            tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:  # fmt: skip
        d = deploy_all(node.url)
        canonical_multicall(node.url, d)
        job_flows(node.url, d, deploy_driver(node.url, d), events, density)
        query = {"address": [d.erc8183], "fromBlock": "0x0", "toBlock": "latest"}
        raw = _post(node.url, [{"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs",
                                "params": [query]}])  # fmt: skip
        cfg = write_config(Path(tmp), "replay", node.url, d,
                           [(CONTRACT_NAME, "erc8183", d.erc8183)],
                           max_range=density.max_range)  # fmt: skip
        asyncio.run(app.run_backfill(str(cfg), to_block=None, progress=False))
    path.write_bytes(pickle.dumps({"raw": raw, "address": d.erc8183, "batches": batches}))
    print(f"{sum(len(b[0]) for b in batches):,} events in {len(batches)} batches -> {path}")


class _TimedConnection(sqlite3.Connection):
    """CPU seconds per statement (its first 60 characters)."""

    spent: defaultdict[str, float] = defaultdict(float)

    def _timed(self, sql: str, call: Callable[[], sqlite3.Cursor]) -> sqlite3.Cursor:
        start = time.process_time()
        try:
            return call()
        finally:
            self.spent[sql[:60]] += time.process_time() - start

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        return self._timed(sql, lambda: super(_TimedConnection, self).execute(sql, *args))

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        return self._timed(sql, lambda: super(_TimedConnection, self).executemany(sql, *args))


def _apply_all(batches: list[Batch], factory: type[sqlite3.Connection] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        if factory is None:
            conn = connect(Path(tmp) / "keeper.db")
        else:
            connect_sqlite = sqlite3.connect
            sqlite3.connect = lambda *a, **k: connect_sqlite(*a, factory=factory, **k)  # type: ignore[assignment]
            try:
                conn = connect(Path(tmp) / "keeper.db")
            finally:
                sqlite3.connect = connect_sqlite
        migrate(conn)
        store = IndexStore(conn, 31337)
        _TimedConnection.spent.clear()
        for batch in batches:
            store.apply_batch(batch)
        conn.close()


def stages(path: Path, rounds: int) -> None:
    tune_process()  # as the daemon and `keeper backfill` run
    rec = pickle.loads(path.read_bytes())
    raw, address = rec["raw"], rec["address"]
    batches = [_batch(b) for b in rec["batches"]]
    result = json.loads(raw)[0]["result"]
    logs = validate_logs(result, addresses=[address])
    protocols = {address.lower(): Protocol.ERC8183}
    times = {lg.block_number: 1 for lg in logs}
    events = sum(len(b.events) for b in batches)

    def best(fn: Callable[[], Any], n: int) -> float:
        return per_event(fn, n, rounds)

    costs = {
        "json.loads of the getLogs body": best(lambda: json.loads(raw), len(result)),
        "validate_logs": best(lambda: validate_logs(result, addresses=[address]), len(logs)),
        "decode_logs": best(lambda: decode_logs(logs, protocols, times), len(logs)),
        "apply_batch": best(lambda: _apply_all(batches), events),
    }
    print(f"{events:,} events in {len(batches)} batches, "
          f"{sum(len(b.reads) for b in batches):,} reads; CPU us per event:")  # fmt: skip
    for name, cost in costs.items():
        print(f"  {name:<40} {cost:6.2f}")
    print(f"  {'sum':<40} {sum(costs.values()):6.2f}")
    start = time.process_time()
    _apply_all(batches, _TimedConnection)
    total = time.process_time() - start
    spent = _TimedConnection.spent
    print(f"apply_batch once more, by SQL statement ({total / events * 1e6:.2f} us in all, "
          f"{sum(spent.values()) / events * 1e6:.2f} in SQLite):")  # fmt: skip
    for sql, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {seconds / events * 1e6:6.2f}  {sql}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("file", type=Path)
    rec.add_argument("events", type=int, nargs="?", default=60_000)
    rec.add_argument("--density", choices=["dense", "sparse"], default="dense")
    rep = sub.add_parser("stages")
    rep.add_argument("file", type=Path)
    rep.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.command == "record":
        record(args.file, args.events, args.density)
    else:
        stages(args.file, args.rounds)


if __name__ == "__main__":
    main()
