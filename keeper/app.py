"""The one-shot commands: backfill, db, config check, status.

Each is a few lines over :func:`keeper.compose.build` (or just the database);
the long-running daemon is :mod:`keeper.daemon` and the demo chain is
:mod:`keeper.devnet_command`, neither of which this module imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from keeper.compose import build, check_chain_id, load, open_database
from keeper.config import Config, load_config, redacted
from keeper.errors import ConfigError, FatalError
from keeper.indexing import Tee
from keeper.leadership import INDEXER, Leadership
from keeper.process_tuning import tune_process
from keeper.progress import ProgressReporter
from keeper.store import db as dbmod
from keeper.store.index_store import IndexStore
from keeper.store.leases import LeaseFence, LeaseStore
from keeper.store.migrations import migrate


async def run_backfill(config_path: str, *, to_block: int | None, progress: bool) -> int:
    cfg = load(config_path)
    tune_process()
    wake = asyncio.Event()
    c = build(cfg, wake)
    reporter = ProgressReporter(enabled=progress and sys.stderr.isatty(), stream=sys.stderr)
    c.indexing.listener = Tee(c.listener, reporter)
    try:
        lead = _lease(c.conn, cfg, "backfill")
    except FatalError:
        await c.rpc.close()
        c.conn.close()
        raise
    c.store.fence = lead.fence
    stop = asyncio.Event()
    renewals = asyncio.create_task(lead.run(stop))
    try:
        await check_chain_id(c.rpc, cfg)
        start = c.indexer.start_cursor()
        head, finalized = await c.indexer.heads()
        target = finalized if to_block is None else min(to_block, head.number)
        reporter.begin(start, target)
        final = await c.indexing.backfill(target)
        summary = reporter.finish(final)
        print(json.dumps(summary, sort_keys=True))
        return 0
    finally:
        stop.set()
        await renewals
        await c.rpc.close()
        lead.release()
        c.conn.close()


def _lease(conn: dbmod.Db, cfg: Config, command: str) -> Leadership:
    """The daemons' indexer lease, for a command that writes the index: never a second
    writer beside a running indexer.

    Its own node name, so the command restarted after a crash takes its lease back at
    once but never takes a live daemon's on the same host; a held lease ends the
    command with the holder's name.
    """
    node = f"{cfg.cluster.node or socket.gethostname()}/{command}"
    lead = Leadership(conn, cfg.chain.chain_id, replace(cfg.cluster, node=node))
    lead.attempt()
    if not lead.leading():
        raise FatalError(
            f"chain {cfg.chain.chain_id} is being indexed by {lead.state.holder_seen} (its "
            f"lease is live): stop that daemon (or let it finish) and run {command} again"
        )
    return lead


def run_db_rebuild(config_path: str) -> int:
    """Rebuild every projection under the indexer lease, held for as long as it runs.

    The lease has a session of its own: the rebuild is one transaction that may idle
    between statements for longer than a lease, and PostgreSQL ends a lease holder's
    session that idles so in a transaction (``Leadership``); the renewals go on from
    that session meanwhile, so a daemon started beside a long rebuild waits for it.
    """
    cfg = load(config_path)
    conn = open_database(cfg)
    lease_conn = dbmod.connect(cfg.database.target)
    try:
        lead = _lease(lease_conn, cfg, "rebuild")
        store = IndexStore(conn, cfg.chain.chain_id)
        # the fence runs in the rebuild's own transaction, so on its session
        store.fence = LeaseFence(LeaseStore(conn, INDEXER, cfg.chain.chain_id), lead.holder)
        store.fence.epoch = lead.epoch
        try:
            with _renewed(lead, dbmod.dialect(conn) == "postgresql"):
                store.rebuild_all()
        finally:
            lead.release()
        print(json.dumps({"rebuilt": True, "database": cfg.database.shown}))
        return 0
    finally:
        lease_conn.close()
        conn.close()


@contextlib.contextmanager
def _renewed(lead: Leadership, renew: bool) -> Iterator[None]:
    """The lease renewed on a thread of its own while the body runs, where ``renew``.

    Not on SQLite: the rebuild's write lock holds every other writer off, renewals and
    takeovers alike, so each renewal would only wait out the busy timeout and fail.
    """
    if not renew:
        yield
        return
    stop = threading.Event()

    def renewing() -> None:
        while not stop.wait(lead.timings.renew_seconds):
            lead.attempt()

    thread = threading.Thread(target=renewing, name="lease-renewal", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_db_migrate(config_path: str) -> int:
    cfg = load(config_path)
    conn = dbmod.connect(cfg.database.target)
    try:
        applied = migrate(conn)
        print(json.dumps({"applied": applied}, sort_keys=True))
        return 0
    finally:
        conn.close()


def run_db_backup(config_path: str, to: str) -> int:
    """Copy the database while the daemon may be writing to it.

    One online-backup step copies every page inside one read transaction: a
    consistent snapshot, and under WAL the daemon's writer is never blocked.
    The copy is integrity-checked under a temporary name and then renamed, so
    ``to`` only ever holds a complete, verified backup.
    """
    cfg = load_config(config_path)
    if cfg.database.url:
        print(
            f"keeper db backup: the database is PostgreSQL ({cfg.database.shown}): back it up "
            "with the server's own tools, pg_dump (a logical copy) or pg_basebackup (a "
            "physical copy; with WAL archiving, point-in-time recovery); see docs/scaling.md",
            file=sys.stderr,
        )
        return 3
    source, target = Path(cfg.database.target), Path(to)
    if not source.exists():
        print(f"keeper db backup: no database at {source}", file=sys.stderr)
        return 1
    if target.resolve() == source.resolve():
        raise ConfigError(f"--to: {target} is the database itself")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    src = dbmod.connect_sqlite(source, readonly=True)
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)
            verdict = str(dst.execute("PRAGMA integrity_check").fetchone()[0])
        finally:
            dst.close()
    finally:
        src.close()
    if verdict != "ok":
        partial.unlink(missing_ok=True)
        raise FatalError(f"backup failed its integrity check: {verdict}")
    partial.replace(target)
    print(json.dumps({"backup": str(target), "bytes": target.stat().st_size}, sort_keys=True))
    return 0


def run_config_check(config_path: str) -> int:
    cfg = load_config(config_path)
    print(json.dumps(redacted(cfg), indent=2, sort_keys=True, default=str))
    return 0


def run_status(config_path: str, *, as_json: bool) -> int:
    from keeper.store.dialects import load_dialects
    from keeper.store.queries import counts_by_status, pause_state, status_summary

    cfg = load_config(config_path)
    if not cfg.database.url and not Path(cfg.database.path).exists():
        print(f"keeper status: no database at {cfg.database.path}", file=sys.stderr)
        return 1
    conn = dbmod.connect(cfg.database.target, readonly=True)
    try:
        summary = dict(status_summary(conn, cfg.chain.chain_id))
        summary["counts"] = counts_by_status(conn)
        summary["dialects"] = load_dialects(conn, cfg.chain.chain_id)
        paused = {}
        for c in cfg.contracts:
            state = pause_state(conn, c.address, chain_id=cfg.chain.chain_id)
            if state is not None and state[0]:
                paused[c.name] = state[1]
        summary["paused"] = paused
        summary["indexer_lease"] = _lease_summary(conn, cfg.chain.chain_id)
    finally:
        conn.close()
    if as_json:
        print(json.dumps(summary, sort_keys=True, default=str))
    else:
        dialects = summary.pop("dialects")
        paused = summary.pop("paused")
        for key, value in sorted(summary.items()):
            print(f"{key:>20}: {value}")
        for d in dialects:
            said = d["dialect"] or "undetermined (indexed; the keeper leaves it alone)"
            print(f"{'dialect ' + d['name']:>20}: {said} [{d['source']}] {d['reason']}")
        for name, block in sorted(paused.items()):
            print(f"{'paused ' + name:>20}: since block {block}; no refund until unpaused")
    return 0


def _lease_summary(conn: dbmod.Db, chain_id: int) -> dict[str, object] | None:
    """Which daemon indexes the chain (several may share the database), by the database clock."""
    leases = LeaseStore(conn, INDEXER, chain_id)
    try:
        row = leases.current()
    except Exception as exc:
        if dbmod.is_missing_table(exc):  # a database not yet migrated to keep leases
            return None
        raise
    if row is None:
        return None
    left = row.expires_at - leases.now()
    return {
        "holder": row.holder,
        "epoch": row.epoch,
        "live": left > 0,
        "expires_in_seconds": round(left, 1),
    }
