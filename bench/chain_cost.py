"""What anvil takes to build the sparse workload as it grows (``python -m bench.chain_cost``).

``[SLICES]`` (default 3) slices of the sparse workload, each SPARSE_BLOCKS
blocks of one wave of 2 jobs (16 events a block), built one after the other
on one node keeping the last 64 states, as a full node would: the seconds and
the node's RSS after each slice, a straight line fitted to the seconds
(anvil's cost per block follows the state already stored, so each slice
costs more than the one before), and what that line says the sparse chains
the backfill targets name (200,000 and 1,000,000 events) would take to
build. Those chains are not in ``make bench`` because of this figure
(bench/README.md, "The backfill workload").
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import FULL_NODE_ANVIL, Result, rss_kb, table, write_result
from bench.escrow_workload import (
    ANVIL_ARGS,
    EVENTS_PER_JOB,
    SPARSE_BLOCKS,
    canonical_multicall,
    deploy_driver,
    job_flows,
    sparse,
)
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all
from keeper.obs.logging import configure_logging

SLICE_EVENTS = 2 * EVENTS_PER_JOB * SPARSE_BLOCKS  # 20,000: the quick sparse workload
TARGETS = (200_000, 1_000_000)


def fit(seconds: list[float]) -> tuple[float, float]:
    """(first slice, growth per slice) of the least-squares line through the slices' seconds."""
    n = len(seconds)
    if n == 1:
        return seconds[0], 0.0
    mean_k, mean_s = (n - 1) / 2, sum(seconds) / n
    growth = sum((k - mean_k) * (s - mean_s) for k, s in enumerate(seconds)) / sum(
        (k - mean_k) ** 2 for k in range(n)
    )
    return mean_s - growth * mean_k, growth


def build_seconds(events: int, first: float, growth: float) -> float:
    """Seconds to build ``events`` sparse events slice by slice, on the fitted line."""
    slices = -(-events // SLICE_EVENTS)
    return slices * first + growth * slices * (slices - 1) / 2


def measure(slices: int) -> Result:
    res = Result("chain-cost-sparse", "slices")
    density = sparse(SLICE_EVENTS)
    seconds: list[float] = []
    with AnvilProcess(extra_args=FULL_NODE_ANVIL + ANVIL_ARGS) as node:
        d = deploy_all(node.url)
        canonical_multicall(node.url, d)
        driver = deploy_driver(node.url, d)
        for k in range(slices):
            start = time.monotonic()
            wl = job_flows(node.url, d, driver, SLICE_EVENTS, density)
            seconds.append(time.monotonic() - start)
            assert node.proc is not None
            rss = rss_kb(node.proc.pid)[0]
            res.add(f"slice {k + 1}: {wl.blocks:,} blocks, {(k + 1) * wl.events:,} events "
                    "stored after it: build seconds", seconds[-1], "s")  # fmt: skip
            res.add(f"slice {k + 1}: the node's RSS after it", rss / 1024, "MB")
            print(f"[chain-cost] slice {k + 1}: {seconds[-1]:.1f} s, node {rss // 1024} MB",
                  file=sys.stderr, flush=True)  # fmt: skip
    first, growth = fit(seconds)
    res.add("fitted: seconds of the first slice", first, "s")
    res.add("fitted: seconds more for each slice already stored", growth, "s")
    for events in TARGETS:
        res.add(f"estimated build time of {events:,} sparse events",
                build_seconds(events, first, growth) / 60, "min")  # fmt: skip
    res.details.update({"slice_events": SLICE_EVENTS, "slice_seconds": seconds})
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chain_cost", description=__doc__)
    parser.add_argument("slices", type=int, nargs="?", default=3)
    args = parser.parse_args(argv)
    configure_logging("console", "warning", stream=sys.stderr)
    res = measure(args.slices)
    write_result(res)
    print(table([res]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
