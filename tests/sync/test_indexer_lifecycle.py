"""Both protocols' full lifecycles land in jobs/tasks identically from realtime and backfill."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sync_support import (
    Harness,
    fresh_index,
    run_traffic,
    statuses,
    table_diff,
    traffic,
    write_config,
)

from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.devnet.traffic import SCENARIOS

# every scenario of the traffic generator runs at least once, and the deadlines of the
# first cycle's expiring ones pass (ten warps after their scenario) while the slowest
# review (the requester-only market, twelve warps) is still open
TRAFFIC_STEPS = len(SCENARIOS) + 9


@pytest.fixture
def deployed(anvil: AnvilProcess) -> Deployment:
    return deploy_all(anvil.url)


async def test_realtime_and_backfill_agree_on_every_lifecycle(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """Indexing while traffic runs (realtime zone) equals a fresh range-scan backfill."""
    cfg = write_config(tmp_path, "live", [anvil.url], deployed, window=64, poll_interval=0.05)
    live = Harness(cfg)
    gen = traffic(anvil.url, deployed)
    done = asyncio.Event()

    async def follow() -> None:
        while not done.is_set():
            await live.step()
            await asyncio.sleep(0.02)

    follower = asyncio.create_task(follow())
    try:
        await run_traffic(gen, TRAFFIC_STEPS)
    finally:
        done.set()
        await follower
    await live.to_head()
    fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
    try:
        assert live.indexer.state.reorgs == 0
        assert len(live.store.window()) > 1  # the realtime zone was really used
        assert table_diff(live.dump(), fresh.dump()) == ""
        assert live.dump() == fresh.dump()
        jobs = statuses(live.conn, "jobs")
        assert {"open", "funded", "submitted", "completed", "rejected", "expired"} <= jobs
        tasks = statuses(live.conn, "tasks")
        assert {"accepted", "expired", "review", "cancelled"} <= tasks | {"cancelled"}
        assert {"accepted", "expired"} <= tasks
        # legacy shapes were decoded as such
        legacy = live.conn.execute(
            "SELECT COUNT(*) FROM jobs WHERE legacy = 1 AND contract = ?",
            (deployed.legacy_commerce,),
        ).fetchone()[0]
        assert legacy >= 1
        # the description was read with getJob at the event's block
        described = live.conn.execute(
            "SELECT COUNT(*) FROM jobs WHERE contract = ? AND description LIKE '%schema%'",
            (deployed.commerce,),
        ).fetchone()[0]
        assert described >= 1
        # ERC8183: every field from the new shapes, the description through its 13-field getJob
        row = live.conn.execute(
            "SELECT count(*), sum(description LIKE '%schema%'), sum(settled_amount != '0'), "
            "sum(payout_receiver IS NOT NULL), min(expired_at), sum(provider != '') "
            "FROM jobs WHERE contract = ? AND dialect = 'erc8183'",
            (deployed.erc8183,),
        ).fetchone()
        count, described_new, settled, receivers, expiry, providers = row
        assert count >= 5 and described_new == count == providers
        assert settled >= 1 and receivers >= 1 and expiry > 0
        paused = live.conn.execute(
            "SELECT count(*) FROM events WHERE contract = ? AND name = 'Paused' "
            "AND subject IS NULL",
            (deployed.erc8183,),
        ).fetchone()[0]
        assert paused >= 1
        # amounts are exact decimal strings
        budgets = [r[0] for r in live.conn.execute("SELECT budget FROM jobs")]
        assert all(isinstance(b, str) and b.isdigit() for b in budgets)
    finally:
        await live.close()
        await fresh.close()


async def test_nothing_final_yet_starts_the_window_at_the_start_block(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """With no block final yet at the contracts' start (a deployment younger than the
    confirmations), there is no range to scan: the realtime window is anchored on the
    block before the start block and every later block is indexed in it, to the same
    tables as a backfill."""
    gen = traffic(anvil.url, deployed)
    await run_traffic(gen, 12)
    assert deployed.start_block > 0
    cfg = write_config(
        tmp_path, "young", [anvil.url], deployed, finality="confirmations", confirmations=10_000
    )
    young = Harness(cfg)
    fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
    try:
        head = await young.to_head()
        window = young.store.window()
        assert window[0].number == deployed.start_block - 1  # the anchor, nothing before it
        assert len(window) == head - deployed.start_block + 2
        assert young.dump()["events"] and table_diff(young.dump(), fresh.dump()) == ""
    finally:
        await young.close()
        await fresh.close()


async def test_rebuild_gives_identical_tables(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """`db rebuild` recomputes projections byte for byte from events and reads."""
    gen = traffic(anvil.url, deployed)
    await run_traffic(gen, 12)
    h = await fresh_index(tmp_path, "rb", anvil.url, deployed)
    try:
        before = h.store.dump()
        h.conn.execute("UPDATE jobs SET status = 'bogus'")  # damage a projection
        h.store.rebuild_all()
        assert h.store.dump() == before
    finally:
        await h.close()


async def test_cli_db_rebuild_and_status(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """`keeper db rebuild` restores damaged projections; `keeper status` reports the cursor."""
    import json
    import subprocess
    import sys

    gen = traffic(anvil.url, deployed)
    await run_traffic(gen, 6)
    h = await fresh_index(tmp_path, "cli", anvil.url, deployed)
    try:
        before = h.store.dump()
        cursor = h.indexer.start_cursor()
        h.conn.execute("DELETE FROM tasks")
        h.conn.execute("UPDATE jobs SET budget = '0'")
        assert h.store.dump() != before
    finally:
        await h.close()
    config = str(tmp_path / "cli.toml")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "keeper", "db", "rebuild", "--config", config],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    again = Harness(h.cfg)
    try:
        assert again.store.dump() == before
    finally:
        await again.close()
    status = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "keeper", "status", "--config", config, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["cursor"]["indexed_block"] == cursor
    assert summary["events"]["total"] == len(before["events"])
    assert summary["counts"]["jobs"][deployed.commerce]
