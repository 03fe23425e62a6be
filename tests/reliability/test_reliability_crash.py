"""Crash torture: the daemon with its keeper, SIGKILLed at random moments under live traffic."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import pytest
from rel_checks import converge_and_check, fail
from rel_daemon import DaemonProc, keeper_traffic
from rel_report import REPORT
from rel_sizes import SIZES, Size
from sync_support import write_config

from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import deploy_all

# a quarter of the kills land during start-up (recovery of in-flight sends, window re-check)
EARLY_KILL_SHARE = 0.25


@pytest.mark.parametrize("size", SIZES)
async def test_sigkill_torture_loses_nothing_and_sends_nothing_twice(
    size: Size, anvil: AnvilProcess, chain: ChainControl, tmp_path: Path
) -> None:
    """N SIGKILLs and restarts: tables equal a fresh backfill, every action once, all done."""
    fig = REPORT.figures(size.name)
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    cfg = write_config(
        tmp_path, "crash", [anvil.url], deployed, poll_interval=0.1, window=32,
        finality="confirmations", confirmations=4,
    )  # fmt: skip
    daemon = DaemonProc.for_config(tmp_path / "crash.toml", tmp_path / "crash.log")
    gen = keeper_traffic(anvil.url, deployed)
    traffic = asyncio.create_task(gen.run())
    rng = random.Random(8183 + size.crash_kills)
    pending = 0  # kills not yet followed by a ready restart
    try:
        for _ in range(size.crash_kills):
            head = await asyncio.to_thread(chain.block_number)
            daemon.start()
            if rng.random() < EARLY_KILL_SHARE:
                await asyncio.sleep(rng.uniform(0.05, 1.5))
            else:
                took = await daemon.wait_ready(60, min_indexed=head)
                assert fail(fig, took is not None, "restart never became ready"), daemon.tail()
                assert took is not None
                REPORT.recovery(size.name, took)
                fig.crash_kills_survived += pending
                pending = 0
                await asyncio.sleep(rng.uniform(0.0, 1.0))
            assert fail(fig, daemon.alive(), "daemon died on its own"), daemon.tail()
            daemon.kill()
            fig.crash_kills_total += 1
            pending += 1
            REPORT.flush()
    finally:
        traffic.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await traffic
    head = await asyncio.to_thread(chain.block_number)
    daemon.start()
    took = await daemon.wait_ready(60, min_indexed=head)
    assert fail(fig, took is not None, "final restart never became ready"), daemon.tail()
    assert took is not None
    REPORT.recovery(size.name, took)
    fig.crash_kills_survived += pending
    try:
        final = await converge_and_check(daemon, cfg, chain, anvil.url, deployed, tmp_path, fig)
    finally:
        if daemon.alive():
            daemon.kill()
        REPORT.flush()
    # the torture only means something if the keeper had work across the kills
    assert final.audit.txs >= 5, final
    assert final.effects >= 5, final
