"""Two trees' ``keeper backfill`` alternated on one workload (``python -m bench.ab OTHER``).

With ``--catchup``, each run is instead the daemon catching up from an empty database
(``bench/catchup.py``: ``keeper run``, indexing and verifying at once), timed to every
event indexed and to every verdict verified.

``OTHER`` is another checkout of the project (``git worktree add /tmp/base HEAD~1``);
its ``keeper`` package is put first on ``PYTHONPATH`` for its runs, and its runs
start in it (where a tree's fetch process used to look for its code first), so
both trees run with this venv's dependencies. One node (anvil, or ``--node hardhat``:
bench/hardhat_node.py), one honest workload (``bench/escrow_workload.py``,
``--density dense``, ``sparse`` or ``sparse-wide``), optionally reached through
a proxy that holds every request ``--latency`` milliseconds (a remote endpoint's
round trip: tests/support/rpc_proxy.py), then
``--rounds`` pairs of end-to-end backfills into fresh databases, the order
within a pair alternating: this machine's speed drifts by more than most
changes move a single run, so only medians of pairs taken side by side
compare (bench/README.md). Every run's database is checked as the backfill
benchmark checks it (every job stored with its description) before it goes.
Both trees' bytecode is written first, as ``make bench`` writes this one's.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import statistics
import tempfile
from pathlib import Path

from bench.backfill import CONTRACT_NAME, check_descriptions, run_backfill
from bench.catchup import daemon_catchup
from bench.common import ARCHIVE_ANVIL, write_config
from bench.escrow_workload import (
    ANVIL_ARGS,
    Workload,
    canonical_multicall,
    deploy_driver,
    indexed_events,
    job_flows,
    pick_density,
)
from bench.hardhat_node import HardhatProcess
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import Deployment, deploy_all
from tests.support.rpc_proxy import ProxyRules, RpcProxy

HERE = Path(__file__).resolve().parent.parent


def run_tree(tree: Path, work: Path, url: str, d: Deployment, span: int, wl: Workload) -> float:
    """Seconds of one end-to-end backfill by ``tree``'s keeper, its database checked."""
    cfg = write_config(work, "ab", url, d, [(CONTRACT_NAME, "erc8183", d.erc8183)],
                       max_range=span)  # fmt: skip
    secs, _, summary = run_backfill(cfg, env={"PYTHONPATH": str(tree)}, cwd=tree)
    expected = indexed_events(url, d, wl)
    if summary["events"] != expected:
        raise RuntimeError(f"{tree}: indexed {summary['events']} of {expected} events")
    check_descriptions(work / "ab.db", wl)
    for name in ("ab.db", "ab.db-wal", "ab.db-shm"):
        (work / name).unlink(missing_ok=True)
    return secs


def catchup_tree(tree: Path, work: Path, url: str, d: Deployment, span: int,
                 wl: Workload) -> tuple[float, float]:  # fmt: skip
    """Seconds of one daemon catch-up by ``tree``'s keeper: (all indexed, all verified)."""
    got = daemon_catchup(work, url, d, (CONTRACT_NAME, "erc8183", d.erc8183), wl.last_block,
                         span, env={"PYTHONPATH": str(tree)}, cwd=tree)  # fmt: skip
    for db in work.glob("catchup-*.db*"):
        db.unlink()
    return got["indexed_seconds"], got["verified_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("other", type=Path, help="the other tree (the baseline)")
    parser.add_argument("events", type=int, nargs="?", default=200_000)
    parser.add_argument("--density", choices=["dense", "sparse", "sparse-wide"], default="dense")
    parser.add_argument("--node", choices=["anvil", "hardhat"], default="anvil")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.0, help="milliseconds a request")
    parser.add_argument(
        "--catchup", action="store_true", help="time the daemon's catch-up, not keeper backfill"
    )
    args = parser.parse_args()
    other = args.other.resolve()
    if not (other / "keeper" / "__init__.py").exists():
        parser.error(f"{other} holds no keeper package")
    density = pick_density(args.density, args.events)
    trees = {"this": HERE, "other": other}
    for tree in trees.values():
        compileall.compile_dir(tree / "keeper", quiet=1)
    rates: dict[str, list[float]] = {name: [] for name in trees}
    node_process = (
        HardhatProcess() if args.node == "hardhat"
        else AnvilProcess(extra_args=[*ARCHIVE_ANVIL, *ANVIL_ARGS])
    )  # fmt: skip
    with node_process as node, tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp, \
            contextlib.ExitStack() as stack:  # fmt: skip
        d = deploy_all(node.url)
        canonical_multicall(node.url, d)
        wl = job_flows(node.url, d, deploy_driver(node.url, d), args.events, density)
        print(f"{wl.events:,} {density.name} events in {wl.blocks:,} blocks on {args.node} "
              f"({args.latency:g} ms a request); this tree {HERE} against {other}, "
              f"{args.rounds} rounds", flush=True)  # fmt: skip
        url = node.url
        if args.latency:  # the keepers' requests only: the workload was built directly
            rules = ProxyRules(latency=args.latency / 1000)
            url = stack.enter_context(RpcProxy(node.url, rules=rules)).url
        verified: dict[str, list[float]] = {name: [] for name in trees}
        for i in range(args.rounds):
            for name in list(trees)[:: 1 if i % 2 == 0 else -1]:
                if args.catchup:
                    secs, all_verified = catchup_tree(trees[name], Path(tmp), url, d,
                                                      density.max_range, wl)  # fmt: skip
                    verified[name].append(wl.events / all_verified)
                    also = f", all verified at {wl.events / all_verified:9,.0f} ev/s"
                else:
                    secs = run_tree(trees[name], Path(tmp), url, d, density.max_range, wl)
                    also = ""
                rates[name].append(wl.events / secs)
                print(f"  round {i + 1} {name:5} {wl.events / secs:9,.0f} ev/s{also}", flush=True)
    what = "all indexed" if args.catchup else "end to end"
    for label, got in ((what, rates), ("all verified", verified)):
        if got["this"]:
            this, base = statistics.median(got["this"]), statistics.median(got["other"])
            print(f"median {label}: this {this:,.0f} ev/s, other {base:,.0f} ev/s, "
                  f"ratio {this / base:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
