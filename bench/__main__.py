"""``python -m bench [--quick] [--only NAME ...]``: run the benchmarks, print one table.

Each benchmark starts its own node (anvil; Hardhat Network for the wide sparse
backfill, bench/hardhat_node.py) and generates its own workload; results
go to ``bench/results/<name>.json`` (with the machine they were taken on).
``--quick`` uses the smaller sizes ``make bench`` runs; the default (full)
sizes are the largest backfill workloads anvil builds in minutes (bench/README.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.common import Result, machine, table, write_result
from keeper.obs.logging import configure_logging


@dataclass(frozen=True)
class Sizes:
    backfill_events: int  # the dense backfill
    sparse_events: int  # the sparse backfill
    naive_events: int
    steady_seconds: float
    latency_fast: int
    latency_slow: int
    rpc_steady_seconds: float
    keeper_jobs: int
    api_events: int
    api_seconds: float
    page_events: int
    backend_events: int  # the same dense backfill into SQLite and PostgreSQL
    million_events: int  # the dense backfill on a node without history
    wide_sparse_events: int  # the sparse backfill over many blocks, on Hardhat Network
    migration_jobs: int  # jobs rewritten by index migration 12, on each backend


QUICK = Sizes(
    200_000, 20_000, 15_000, 10, 40, 12, 12, 1_000, 60_000, 10, 200_000, 50_000, 1_000_000,
    wide_sparse_events=200_000, migration_jobs=200_000,
)  # fmt: skip
FULL = Sizes(
    400_000, 40_000, 30_000, 30, 100, 30, 30, 1_000, 300_000, 30, 1_000_000, 200_000, 1_000_000,
    # not 1,000,000: Hardhat Network holds about 1.1 GB a 50,000 sparse events (bench/README.md)
    wide_sparse_events=200_000, migration_jobs=1_000_000,
)  # fmt: skip


def benches(s: Sizes, mode: str) -> dict[str, Callable[[], list[Result]]]:
    from bench.api import bench_api
    from bench.backends import bench_backends
    from bench.backfill import bench_backfill, bench_backfill_million, bench_backfill_sparse_wide
    from bench.keeper import bench_keeper
    from bench.migration import bench_migration
    from bench.realtime import bench_realtime
    from bench.status_page import bench_status_page

    return {
        "backfill": lambda: bench_backfill(s.backfill_events, sparse_events=s.sparse_events,
                                           naive_events=s.naive_events,
                                           steady_seconds=s.steady_seconds, mode=mode),
        "backfill-1m": lambda: bench_backfill_million(s.million_events,
                                                      naive_events=s.naive_events, mode=mode),
        "backfill-sparse-wide": lambda: bench_backfill_sparse_wide(
            s.wide_sparse_events, naive_events=s.naive_events, mode=mode),
        "realtime": lambda: [bench_realtime(s.latency_fast, s.latency_slow,
                                            s.rpc_steady_seconds, mode)],
        "keeper": lambda: [bench_keeper(s.keeper_jobs, mode),
                           bench_keeper(s.keeper_jobs, mode, kind="erc8183"),
                           bench_keeper(s.keeper_jobs, mode, kind="tasks")],
        "api": lambda: [bench_api(s.api_events, s.api_seconds, mode)],
        "page": lambda: [bench_status_page(s.page_events, mode)],
        "backends": lambda: [bench_backends(s.backend_events, mode)],
        "migration": lambda: [bench_migration(s.migration_jobs, mode)],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (make bench)")
    parser.add_argument("--only", nargs="*", choices=list(benches(QUICK, "quick")),
                        help="run only these (memory comes with backfill)")  # fmt: skip
    args = parser.parse_args(argv)
    configure_logging("console", "warning", stream=sys.stderr)
    mode = "quick" if args.quick else "full"
    todo = benches(QUICK if args.quick else FULL, mode)
    m = machine()
    print(f"machine: {m['nproc']} cores, {m['cpu']}, {m['memory_mb']} MB; mode {mode}", flush=True)
    results: list[Result] = []
    for name, run in todo.items():
        if args.only and name not in args.only:
            continue
        start = time.monotonic()
        print(f"[{name}] running ...", flush=True)
        for res in run():
            res.details["bench_seconds"] = round(time.monotonic() - start, 1)
            path = write_result(res)
            results.append(res)
            print(f"[{name}] {res.bench}: done in {time.monotonic() - start:.0f} s -> {path}",
                  flush=True)  # fmt: skip
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
