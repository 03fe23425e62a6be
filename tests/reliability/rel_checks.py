"""The end-of-run verdict shared by the crash, reorg and fault tortures.

After the torture the last daemon keeps running until the planner, fed by a
fresh index of the chain, finds nothing due and the daemon's keeper has no
intent left open; then it is stopped with SIGTERM and everything is compared:
the daemon's tables against the fresh index (lost / extra rows), the keeper's
mined transactions (duplicates, double executions), the verifications
(none of a verdict the chain no longer has, none missing), SQLite integrity.
Figures go to the report before any assertion, so a failing run still shows them.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from rel_audit import (
    KeeperAudit,
    adopt_silent_endings,
    audit_keeper,
    denied_in,
    due_now,
    effect_count,
    effect_repeats,
    hook_blocked_in,
    integrity,
    stale_open_intents,
    unsettled_intents,
    verification_gaps,
)
from rel_daemon import DaemonProc
from rel_report import Figures
from sync_support import CONTENT_TABLES, Harness, fresh_index, table_diff

from keeper.config import Config
from keeper.devnet.anvil import ChainControl
from keeper.devnet.deploy import Deployment
from keeper.devnet.traffic import KEEPER_KEY, address_of

__all__ = ["Final", "converge_and_check"]


@dataclass
class Final:
    audit: KeeperAudit
    effects: int
    lost: int
    extra: int


def fail(fig: Figures, ok: bool, what: str) -> bool:
    """Record a failed check in the report; return ``ok`` for the assertion."""
    if not ok:
        fig.checks_failed.append(what)
    return ok


def current_test() -> str:
    """The running test's name and parameters (``test_x[long]``), for the report's lines:
    a wasted send is traced from the torture that made it."""
    running = os.environ.get("PYTEST_CURRENT_TEST", "")
    return running.split(" ", 1)[0].rsplit("::", 1)[-1] or "outside pytest"


async def converge_and_check(
    daemon: DaemonProc,
    cfg: Config,
    chain: ChainControl,
    rpc_url: str,
    deployed: Deployment,
    tmp: Path,
    fig: Figures,
    *,
    within: float = 120.0,
) -> Final:
    """Let the running daemon finish every due action, stop it, and check everything."""
    assert daemon.alive(), daemon.tail()
    db = Path(cfg.database.path)
    fresh = await fresh_index(tmp, f"fresh-{int(time.monotonic() * 1000)}", rpc_url, deployed)
    try:
        due: list[object] = []
        unsettled: list[object] = []
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            # a block on top confirms the keeper's last transactions and moves chain time
            await asyncio.to_thread(chain.mine, 1)
            head = await asyncio.to_thread(chain.block_number)
            # each head within what is left of ``within`` (a minute at least): the long fault
            # run's 60 429s in a row, drawn here, held the daemon a minute behind in one run
            left = max(60.0, deadline - time.monotonic())
            assert await daemon.wait_indexed(head, left), daemon.tail()
            await asyncio.sleep(0.3)  # one keeper tick on that head
            await fresh.to_head()
            adopt_silent_endings(db, fresh, rpc_url)
            due = list(await due_now(fresh, denied_in(db), hook_blocked_in(db)))
            unsettled = list(unsettled_intents(db))
            gaps = verification_gaps(db, cfg.chain.chain_id)
            if not due and not unsettled and not gaps:
                break
        ok = fail(fig, not due and not unsettled, f"still due {due[:3]}, unsettled {unsettled[:3]}")
        assert ok, (due[:5], unsettled[:5], daemon.tail())
        assert fail(fig, not gaps, f"verifications: {gaps[:3]}"), (gaps[:5], daemon.tail())
        stale = stale_open_intents(db)
        fig.stale_open_intents += len(stale)
        assert fail(fig, not stale, f"intents left open, never decided: {stale[:3]}"), stale
        code = daemon.stop()
        assert fail(fig, code == 0, f"daemon exited {code} on SIGTERM"), daemon.tail()
        assert fail(fig, integrity(db) == "ok", "PRAGMA integrity_check")

        await fresh.to_head()
        fig.silent_endings += adopt_silent_endings(db, fresh, rpc_url)
        mine = Harness(cfg)
        try:
            a, b = mine.dump(), fresh.dump()
        finally:
            await mine.close()
        lost = sum(len(set(b[t]) - set(a[t])) for t in CONTENT_TABLES)
        extra = sum(len(set(a[t]) - set(b[t])) for t in CONTENT_TABLES)
        fig.lost_events += lost
        fig.extra_events += extra
        assert fail(fig, lost == extra == 0, "tables differ from a fresh backfill"), table_diff(
            a, b
        )
        assert a == b

        head = await asyncio.to_thread(chain.block_number)
        audit = await asyncio.to_thread(
            audit_keeper, rpc_url, address_of(KEEPER_KEY), deployed.start_block, head
        )
        fig.keeper_txs_audited += audit.txs
        fig.duplicate_sends += audit.duplicate_sends
        fig.wasted_sends += audit.wasted_sends
        fig.wasted += [f"{missed} ({current_test()})" for missed in audit.missed]
        fig.double_executions += audit.double_executions
        repeats = effect_repeats(fresh.conn)
        assert fail(fig, audit.duplicate_sends == 0, "duplicate sends"), audit.repeats()
        assert fail(fig, audit.double_executions == 0, "double executions"), audit.repeats()
        assert fail(fig, not repeats, "keeper effect events repeated"), repeats
        assert all(n == 1 for n in audit.per_nonce.values())
        return Final(audit, effect_count(fresh.conn), lost, extra)
    finally:
        await fresh.close()
