"""Profile the in-process backfill with pyinstrument (``python -m bench.profile EVENTS``).

The same workload and config as the backfill benchmark; prints the call tree
so an optimisation starts from evidence, and writes an HTML report beside the
results.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from pyinstrument import Profiler

from bench.backfill import JOBS_PER_BLOCK, MAX_RANGE
from bench.common import RESULTS, write_config
from bench.workload import job_flows
from keeper import app
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("events", type=int, nargs="?", default=60_000)
    args = parser.parse_args()
    with AnvilProcess() as node, tempfile.TemporaryDirectory(prefix="bench-prof-") as tmp:
        d = deploy_all(node.url)
        job_flows(node.url, d.emitter, args.events, jobs_per_block=JOBS_PER_BLOCK)
        cfg = write_config(Path(tmp), "prof", node.url, d, [("emitter", "erc8183", d.emitter)],
                           max_range=MAX_RANGE)  # fmt: skip
        profiler = Profiler(interval=0.0005, async_mode="enabled")
        profiler.start()
        asyncio.run(app.run_backfill(str(cfg), to_block=None, progress=False))
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "profile-backfill.html").write_text(profiler.output_html())


if __name__ == "__main__":
    main()
