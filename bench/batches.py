"""Memory and speed of a backfill by chain density, bounded batches beside unbounded ones.

``python -m bench.batches [EVENTS] [--jobs-per-block N ...]``. For each
density (jobs per block, 6 events each) one anvil, one emitter workload, and
``keeper backfill`` run twice on it as a subprocess into fresh databases:
with the defaults a new user gets (``[chain]`` sets nothing but the
endpoint: ``max_range`` 2000, ``batch_events``, ``batch_bytes``), and the
same config with the batch bounds lifted, which is how the daemon sized its
batches before they were bounded (by blocks alone). Peak RSS is the child's
own ``VmHWM``. Figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
from pathlib import Path

from bench.backfill import run_backfill
from bench.common import ARCHIVE_ANVIL, write_config
from bench.workload import job_flows
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import Deployment, deploy_all

UNBOUNDED = "batch_events = 1000000000\nbatch_bytes = 1000000000000\n"


def _config(work: Path, name: str, url: str, d: Deployment, *, bounded: bool) -> Path:
    cfg = write_config(work, name, url, d, [("emitter", "erc8183", d.emitter)])
    if not bounded:
        text = cfg.read_text()
        cfg.write_text(text.replace("max_range = 2000\n", "max_range = 2000\n" + UNBOUNDED, 1))
    return cfg


def measure(events: int, jobs_per_block: int) -> None:
    with AnvilProcess(extra_args=ARCHIVE_ANVIL) as node, \
            tempfile.TemporaryDirectory(prefix="bench-batches-") as tmp:  # fmt: skip
        work = Path(tmp)
        d = deploy_all(node.url)
        wl = job_flows(node.url, d.emitter, events, jobs_per_block=jobs_per_block)
        print(f"{wl.events:,} events in {wl.blocks} blocks ({jobs_per_block * 6:,} a block)")
        for name, bounded in (("bounded", True), ("unbounded", False), ("bounded2", True)):
            cfg = _config(work, name, node.url, d, bounded=bounded)
            secs, peak_kb, summary = run_backfill(cfg)
            conn = sqlite3.connect(work / f"{name}.db")
            stored = conn.execute("SELECT count(*) FROM events").fetchone()[0]
            conn.close()
            assert stored == wl.events, (stored, wl.events)
            print(f"  {name:<10} peak RSS {peak_kb / 1024:6.1f} MB  "
                  f"{wl.events / secs:8,.0f} ev/s end to end  "
                  f"({summary['events_per_second']:,.0f} in process)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("events", type=int, nargs="?", default=200_000)
    parser.add_argument("--jobs-per-block", type=int, nargs="*", default=[500, 25])
    args = parser.parse_args()
    for jobs in args.jobs_per_block:
        measure(args.events, jobs)


if __name__ == "__main__":
    main()
