"""Three daemons on one database: one indexes, a standby takes over, nothing lost or doubled.

Real processes (``keeper run``), one anvil, devnet traffic throughout. The
final tables are compared with a fresh single-writer index of the same chain,
and a watcher on the shared database checks the cursor never moved back (the
traffic makes no reorgs, so any step down would be a stale writer's). Each
test runs on one SQLite file and on one PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from cluster_support import (
    LEASE,
    RENEW,
    CursorWatch,
    cluster,
    kill_all,
    leader_of,
    logged,
    metric,
    stall,
    stop_inside_a_write,
)
from rel_daemon import DaemonProc
from support.postgres import PostgresServer
from sync_support import CONTENT_TABLES, Harness, fresh_index, table_diff, traffic, write_config

from keeper.config import Config
from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import Deployment, deploy_all


async def _setup(
    anvil: AnvilProcess, tmp: Path, database: str
) -> tuple[Deployment, Config, list[DaemonProc]]:
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    cfg = write_config(
        tmp, "shared", [anvil.url], deployed, database=database, poll_interval=0.1, window=32,
        finality="confirmations", confirmations=4,
    )  # fmt: skip
    daemons = cluster(tmp / "shared.toml", tmp, ["a", "b", "c"])
    # on SQLite the first one migrates the file and the others find it up to date; on
    # PostgreSQL all three start at once, racing for the empty database's migration lock
    first = daemons if database.startswith("postgresql://") else daemons[:1]
    try:
        for group in (first, daemons[len(first) :]):
            for d in group:
                d.start()
            for d in group:
                assert await d.wait_ready(60) is not None, d.tail()
    except BaseException:
        kill_all(daemons)  # the test's own cleanup has not begun yet
        raise
    return deployed, cfg, daemons


async def _roles(daemons: list[DaemonProc]) -> tuple[DaemonProc, DaemonProc, DaemonProc]:
    """The leader first, then the two standbys."""
    lead = await leader_of(daemons, 10)
    if lead is None:
        tails = [d.tail() for d in daemons]
        kill_all(daemons)
        raise AssertionError(f"no one leader: {tails}")
    b, c = (d for d in daemons if d is not lead)
    return lead, b, c


# steps the traffic makes at least, however slow a loaded machine makes each one, so the
# final comparison has an index worth comparing
MIN_STEPS = 60


async def _traffic(anvil: AnvilProcess, deployed: Deployment, stop: asyncio.Event) -> int:
    gen = traffic(anvil.url, deployed)
    steps = 0
    while not stop.is_set() or steps < MIN_STEPS:
        await asyncio.to_thread(gen.step)
        steps += 1
        await asyncio.sleep(0.02)
    return steps


async def _equal_to_fresh(
    cfg: Config, anvil: AnvilProcess, deployed: Deployment, tmp: Path
) -> None:
    fresh = await fresh_index(tmp, "fresh", anvil.url, deployed)
    mine = Harness(cfg)
    try:
        await fresh.to_head()
        a, b = mine.dump(), fresh.dump()
        lost = sum(len(set(b[t]) - set(a[t])) for t in CONTENT_TABLES)
        extra = sum(len(set(a[t]) - set(b[t])) for t in CONTENT_TABLES)
        assert (lost, extra) == (0, 0), table_diff(a, b)
        assert a == b
        assert len(a["events"]) > 50  # the traffic made the index worth comparing
    finally:
        await mine.close()
        await fresh.close()


def _stop_all(daemons: list[DaemonProc]) -> None:
    for d in daemons:
        if d.alive():
            d.stop()


async def test_kill_9_of_the_leader_hands_indexing_to_a_standby(
    anvil: AnvilProcess, chain: ChainControl, tmp_path: Path, database: str
) -> None:
    """SIGKILL mid-traffic: one standby leads within lease + renewal, tables equal a fresh index."""
    deployed, cfg, daemons = await _setup(anvil, tmp_path, database)
    a, b, c = await _roles(daemons)
    stop = asyncio.Event()
    try:
        async with CursorWatch(database, cfg.chain.chain_id) as watch:
            load = asyncio.create_task(_traffic(anvil, deployed, stop))
            await asyncio.sleep(1.5)
            killed_at_head = await asyncio.to_thread(chain.block_number)
            a.kill()
            killed = time.monotonic()
            new = await leader_of([b, c], LEASE * 5)
            assert new is not None, (b.tail(), c.tail())
            took = time.monotonic() - killed
            assert await new.wait_indexed(killed_at_head + 1, 30), new.tail()
            await asyncio.sleep(1.0)
            stop.set()
            assert await load > 0
            await asyncio.to_thread(chain.mine, 1)
            head = await asyncio.to_thread(chain.block_number)
            for d in (b, c):  # the standby follows the leader's cursor too
                assert await d.wait_indexed(head, 30), d.tail()
        assert watch.seen and not list(watch.backwards()), watch.seen
        # the takeover is measured (database clock) and exported by the daemon that took
        # over: about the lease, plus up to a renewal and whatever a loaded machine adds
        first = metric(new, "keeper_lease_failovers_total")
        gap = metric(new, "keeper_lease_failover_seconds_sum")
        assert first is not None and first >= 1.0
        assert gap is not None and LEASE - RENEW <= gap / first <= 2 * LEASE + 1, (gap, first)
        assert took >= LEASE - 2 * RENEW, (
            took
        )  # no standby took a live lease (renewed <= RENEW+ ago)
        # one leader at the end, and the other standby knows it is not one
        final = await leader_of([b, c], 5)
        assert final is not None
        assert metric(c if final is b else b, "keeper_lease_leader") == 0.0
        _stop_all([b, c])
    finally:
        stop.set()
        kill_all(daemons)
    await _equal_to_fresh(cfg, anvil, deployed, tmp_path)


async def test_a_stalled_leader_is_fenced_out_and_steps_down(
    anvil: AnvilProcess, chain: ChainControl, tmp_path: Path, database: str
) -> None:
    """SIGSTOP past the lease, a standby takes over, SIGCONT: the old leader writes nothing."""
    deployed, cfg, daemons = await _setup(anvil, tmp_path, database)
    a, b, c = await _roles(daemons)
    stop = asyncio.Event()
    assert a.proc is not None
    try:
        async with CursorWatch(database, cfg.chain.chain_id) as watch:
            load = asyncio.create_task(_traffic(anvil, deployed, stop))
            await asyncio.sleep(1.0)
            await stall(a, database)
            new = await leader_of([b, c], LEASE * 5)
            assert new is not None, (b.tail(), c.tail())
            stalled_at = await asyncio.to_thread(chain.block_number)
            assert await new.wait_indexed(stalled_at, 30), new.tail()
            a.proc.send_signal(signal.SIGCONT)
            # the old leader learns it lost the lease (by its renewal or a fenced commit)
            assert await logged(a, "lease_lost", 10), a.tail()
            new = await leader_of(daemons, 5)  # on a loaded machine, maybe another by now
            assert new is not None and new is not a
            assert metric(a, "keeper_lease_leader") == 0.0
            await asyncio.sleep(1.0)
            stop.set()
            await load
            await asyncio.to_thread(chain.mine, 1)
            head = await asyncio.to_thread(chain.block_number)
            for d in daemons:
                assert await d.wait_indexed(head, 30), d.tail()
        assert not list(watch.backwards()), watch.seen
        # it stays a standby and knows the epoch that holds the lease now
        epoch = metric(new, "keeper_lease_epoch")
        assert epoch is not None and epoch >= 2.0
        assert metric(a, "keeper_lease_epoch") == epoch
        assert metric(a, "keeper_lease_leader") == 0.0
        _stop_all(daemons)
    finally:
        stop.set()
        kill_all(daemons)  # SIGKILL ends a stopped process as well
    await _equal_to_fresh(cfg, anvil, deployed, tmp_path)


async def test_a_postgresql_crash_restart_mid_batch_loses_nothing_and_the_daemons_reconnect(
    anvil: AnvilProcess, chain: ChainControl, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """pg_ctl restart -m immediate while the leader is inside a fenced transaction: every
    session is cut and the open batch rolls back with it; all three daemons reconnect on
    their own and index on, the cursor never moves back, the tables equal a fresh index."""
    url = postgres_server.database()
    deployed, cfg, daemons = await _setup(anvil, tmp_path, url)
    stop = asyncio.Event()
    try:
        assert await leader_of(daemons, 10) is not None
        async with CursorWatch(url, cfg.chain.chain_id) as watch:
            load = asyncio.create_task(_traffic(anvil, deployed, stop))
            await asyncio.sleep(1.0)
            # the leader held inside a fenced transaction while the server crash-restarts,
            # so its transaction is open when the server dies, then let it go on
            leader = await leader_of(daemons, 5)
            assert leader is not None and leader.proc is not None
            await stop_inside_a_write(leader, url)
            try:
                await asyncio.to_thread(postgres_server.restart_immediate)
            finally:
                leader.proc.send_signal(signal.SIGCONT)
            restarted_at = await asyncio.to_thread(chain.block_number)
            await asyncio.sleep(2.0)
            stop.set()
            assert await load > 0
            await asyncio.to_thread(chain.mine, 1)
            head = await asyncio.to_thread(chain.block_number)
            assert head > restarted_at
            for d in daemons:  # none exited: each reconnected and follows the index
                assert await d.wait_indexed(head, 30), d.tail()
                assert d.alive(), d.tail()
        assert watch.seen and watch.seen[-1] >= head and not list(watch.backwards()), watch.seen
        assert await leader_of(daemons, 5) is not None
        _stop_all(daemons)
    finally:
        stop.set()
        kill_all(daemons)
    await _equal_to_fresh(cfg, anvil, deployed, tmp_path)
