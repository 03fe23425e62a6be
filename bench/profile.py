"""Profile the in-process backfill (``python -m bench.profile [EVENTS] [--stages]``).

The same workload (``--density dense`` or ``sparse``) and config as the
backfill benchmark. By default a
pyinstrument call tree (text, plus HTML under ``bench/results/``); with
``--stages``, wall and CPU seconds per indexer stage, measured by wrapping
the stage methods, which shows how much of the wall time is spent waiting
for the node rather than computing (a sampling profiler's percentages hide
that on a loaded machine); the CPU seconds of the node and of the fetch
process beside them; the cycle collector's runs and CPU (``gc.callbacks``);
and the time per event of each SQL statement the index
store runs (its connection wrapped), which shows the commit path's budget.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from bench.backfill import CONTRACT_NAME, node_cpu_seconds
from bench.common import ARCHIVE_ANVIL, RESULTS, children, stat_cpu, write_config
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
from keeper.indexing import IndexPipeline
from keeper.rpc.client import RpcClient
from keeper.store.index_store import IndexStore
from keeper.store.projections import Projections
from keeper.sync.indexer import Indexer

STAGES: list[tuple[type, str]] = [
    (RpcClient, "get_logs"),
    (RpcClient, "get_blocks"),
    (Indexer, "decode"),
    (Indexer, "execute_reads"),
    (IndexPipeline, "apply"),
    (Projections, "rebuild_subjects"),
]


def _instrument(wall: dict[str, float], cpu: dict[str, float]) -> None:
    """Wrap each stage method so its wall and CPU seconds accumulate."""
    for owner, name in STAGES:
        original: Callable[..., Any] = getattr(owner, name)
        if asyncio.iscoroutinefunction(original):

            async def timed_async(*a: Any, _f: Any = original, _n: str = name, **k: Any) -> Any:
                t, c = time.perf_counter(), time.process_time()
                try:
                    return await _f(*a, **k)
                finally:
                    wall[_n] += time.perf_counter() - t
                    cpu[_n] += time.process_time() - c

            setattr(owner, name, functools.wraps(original)(timed_async))
        else:

            def timed(*a: Any, _f: Any = original, _n: str = name, **k: Any) -> Any:
                t, c = time.perf_counter(), time.process_time()
                try:
                    return _f(*a, **k)
                finally:
                    wall[_n] += time.perf_counter() - t
                    cpu[_n] += time.process_time() - c

            setattr(owner, name, functools.wraps(original)(timed))


async def _watching_children(
    run: Coroutine[Any, Any, Any], cpu: dict[int, float], node_pid: int
) -> None:
    """Run the backfill while sampling the CPU seconds of the fetch processes it starts."""

    async def sample() -> None:
        while True:
            for pid in children(os.getpid()):
                if pid == node_pid:
                    continue
                with contextlib.suppress(OSError):
                    cpu[pid] = stat_cpu(Path(f"/proc/{pid}/stat"))
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    try:
        await run
    finally:
        sampler.cancel()


class _TimedConnection:
    """The index store's connection, timing each statement by its first words.

    A SELECT's rows fetched after ``execute`` returns are not in its time.
    """

    def __init__(self, conn: Any, seconds: dict[str, float]) -> None:
        self._conn = conn
        self._seconds = seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _timed(self, method: str, sql: str, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return getattr(self._conn, method)(sql, *args)
        finally:
            self._seconds[" ".join(sql.split())[:64]] += time.perf_counter() - start

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed("execute", sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._timed("executemany", sql, *args)


@contextlib.contextmanager
def _time_collections() -> Iterator[dict[int, tuple[int, float]]]:
    """Runs and CPU seconds of this process's cycle collector by generation, while open
    (its young collections are the price of the objects a batch allocates)."""
    spent: dict[int, tuple[int, float]] = {}
    started = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
            return
        count, seconds = spent.get(info["generation"], (0, 0.0))
        spent[info["generation"]] = (count + 1, seconds + time.process_time() - started[0])

    gc.callbacks.append(callback)
    try:
        yield spent
    finally:
        gc.callbacks.remove(callback)


def _time_statements(seconds: dict[str, float]) -> None:
    """Give every IndexStore a timed connection (the backfill builds one)."""
    original = IndexStore.__init__

    def init(self: IndexStore, conn: Any, *a: Any, **k: Any) -> None:
        original(self, _TimedConnection(conn, seconds), *a, **k)

    IndexStore.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("events", type=int, nargs="?", default=60_000)
    parser.add_argument("--stages", action="store_true", help="per-stage wall/CPU seconds")
    parser.add_argument("--density", choices=["dense", "sparse"], default="dense")
    args = parser.parse_args()
    density = pick_density(args.density, args.events)
    with AnvilProcess(extra_args=ARCHIVE_ANVIL + ANVIL_ARGS) as node, \
            tempfile.TemporaryDirectory(prefix="bench-prof-") as tmp:  # fmt: skip
        d = deploy_all(node.url)
        canonical_multicall(node.url, d)
        wl = job_flows(node.url, d, deploy_driver(node.url, d), args.events, density)
        print(f"{wl.events:,} events in {wl.blocks:,} blocks, generated in {wl.seconds:.0f} s")
        cfg = write_config(Path(tmp), "prof", node.url, d,
                           [(CONTRACT_NAME, "erc8183", d.erc8183)],
                           max_range=density.max_range)  # fmt: skip
        run = functools.partial(app.run_backfill, str(cfg), to_block=None, progress=False)
        if args.stages:
            wall: dict[str, float] = defaultdict(float)
            cpu: dict[str, float] = defaultdict(float)
            _instrument(wall, cpu)
            statements: dict[str, float] = defaultdict(float)
            _time_statements(statements)
            assert node.proc is not None
            fetch_cpu: dict[int, float] = {}
            with _time_collections() as collections:
                t, c, n = time.perf_counter(), time.process_time(), node_cpu_seconds(node)
                asyncio.run(_watching_children(run(), fetch_cpu, node.proc.pid))
            print(f"{'total':<20} wall {time.perf_counter() - t:7.2f} s  "
                  f"cpu {time.process_time() - c:7.2f} s")  # fmt: skip
            # the other processes on the same cores: the node, and the fetch process
            print(f"{'node (anvil)':<20} {'':13}  cpu {node_cpu_seconds(node) - n:7.2f} s")
            if fetch_cpu:
                print(f"{'fetch process':<20} {'':13}  cpu {sum(fetch_cpu.values()):7.2f} s")
            for name in wall:
                print(f"{name:<20} wall {wall[name]:7.2f} s  cpu {cpu[name]:7.2f} s")
            for generation, (count, spent) in sorted(collections.items()):
                print(f"{'collector, gen ' + str(generation):<20} {count:>5} runs      "
                      f"cpu {spent:7.2f} s")  # fmt: skip
            print(f"SQL statements, {sum(statements.values()):.2f} s in all, per event:")
            for sql, spent in sorted(statements.items(), key=lambda kv: -kv[1])[:12]:
                print(f"  {spent * 1e6 / wl.events:6.2f} us  {sql}")
            return
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="enabled")
        profiler.start()
        asyncio.run(run())
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "profile-backfill.html").write_text(profiler.output_html())


if __name__ == "__main__":
    main()
