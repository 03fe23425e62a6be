"""Two keepers (two signers, two ``keeper run`` daemons) on one database share the work once.

The traffic leaves every refund, finalisation and timeout to the daemons.
One keeper is SIGKILLed right after it broadcasts a transaction, before it
can settle it; the other adopts the dead keeper's in-flight intents once
their claim runs out and settles them from the chain. The audit walks every
block: each action took effect once, and no transaction of either signer
carried it after that; the keepers' books show no action signed at a second
(signer, nonce) while an attempt at the first could still land (anvil mines
everything it is sent, so such a pair would also show on chain); and the
tables equal a fresh index. On one SQLite file and on one PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from cluster_support import cluster, kill_all, logged
from rel_audit import (
    adopt_silent_endings,
    audit_keeper,
    denied_in,
    due_now,
    effect_repeats,
    hook_blocked_in,
    unsettled_intents,
)
from rel_daemon import DaemonProc
from support.devnet_timing import FAST
from sync_support import CONTENT_TABLES, Harness, fresh_index, table_diff, write_config

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess, ChainControl
from keeper.devnet.deploy import deploy_all
from keeper.devnet.evaluator_service import VerdictBook, load_fixtures
from keeper.devnet.traffic import KEEPER_KEY, TrafficGenerator, address_of
from keeper.domain.settlement import ACTIVE_ATTEMPT
from keeper.store.db import connect

KEYS = (KEEPER_KEY, DEV_KEYS[7])  # the daemon's key and the traffic's idle fallback keeper
CLAIM_SECONDS = 3.0


def _sends(d: DaemonProc) -> int:
    return d.output(since_start=True).count('"event": "keeper_tx_sent"')


async def _next_send(daemons: list[DaemonProc], after: int, within: float) -> DaemonProc | None:
    """The daemon that logs a broadcast once ``after`` were logged by all, caught within a
    few milliseconds of it."""
    deadline = time.monotonic() + within
    seen = [_sends(d) for d in daemons]
    while time.monotonic() < deadline:
        now = [_sends(d) for d in daemons]
        for d, before, count in zip(daemons, seen, now, strict=True):
            if count > before and sum(now) > after:
                return d
        seen = now
        await asyncio.sleep(0.005)
    return None


def _signed_beside_live(db: str) -> tuple[int, list[tuple[str, str, str]]]:
    """Actions signed at all, and those given a new (signer, nonce) while an attempt at an
    earlier pair was still live (fee bumps share a pair; refused sends never left)."""
    conn = connect(db)
    try:
        rows = conn.execute(
            "SELECT i.contract, i.subject, i.action, a.signer, a.nonce, a.status, a.created_at,"
            " a.updated_at FROM keeper_intents i JOIN keeper_attempt_intents l"
            " ON l.intent_id = i.id JOIN keeper_attempts a ON a.id = l.attempt_id"
            " WHERE a.status != 'failed' ORDER BY i.id, a.id"
        ).fetchall()
    finally:
        conn.close()
    pairs: dict[tuple[str, str, str], dict[tuple[str, int], list[tuple[str, float, float]]]] = {}
    for contract, subject, action, signer, nonce, status, created, updated in rows:
        at = pairs.setdefault((str(contract), str(subject), str(action)), {})
        at.setdefault((str(signer), int(nonce)), []).append(
            (str(status), float(created), float(updated))
        )
    beside = []
    for key, by_pair in pairs.items():
        # a pair none of whose attempts is live (ACTIVE_ATTEMPT) has its fate known: a new
        # signature after that is a new decision, not a second transaction beside it (a
        # pause that landed between the gate and the block can fail a batched call, and
        # the keeper tries again once it lifts)
        settled_at = [
            max(u for _, _, u in a) if all(st not in ACTIVE_ATTEMPT for st, _, _ in a) else None
            for a in by_pair.values()
        ]
        signed_at = [min(c for _, c, _ in a) for a in by_pair.values()]
        for later in range(1, len(signed_at)):
            if any(s is None or s > signed_at[later] for s in settled_at[:later]):
                beside.append(key)
                break
    return len(pairs), beside


def _history(db: str, keys: list[tuple[str, str, str]]) -> list[dict[str, object]]:
    """The intent row and every attempt of each action in ``keys``: what a failure shows."""
    conn = connect(db)
    try:
        out: list[dict[str, object]] = []
        for contract, subject, action in keys:
            intent = conn.execute(
                "SELECT id, status, outcome, detail, attempts, claimed_by FROM keeper_intents"
                " WHERE contract = ? AND subject = ? AND action = ?",
                (contract, subject, action),
            ).fetchone()
            attempts = conn.execute(
                "SELECT a.tx_hash, a.signer, a.nonce, a.kind, a.status, a.receipt_status,"
                " a.created_at FROM keeper_attempt_intents l JOIN keeper_attempts a"
                " ON a.id = l.attempt_id WHERE l.intent_id = ? ORDER BY a.id",
                (intent[0],),
            ).fetchall()
            out.append(
                {
                    "key": (contract, subject, action),
                    "intent": tuple(intent),
                    "attempts": [tuple(a) for a in attempts],
                }
            )
        return out
    finally:
        conn.close()


def _said(
    daemons: list[DaemonProc], keys: list[tuple[str, str, str]], history: list[dict[str, object]]
) -> dict[str, list[str]]:
    """Each daemon's log lines that name one of the actions in ``keys`` or their attempts."""
    marks = {str(a[0]) for h in history for a in h["attempts"]}  # type: ignore[attr-defined]
    marks |= {f'"contract": "{c}", "subject": "{s}"' for c, s, _ in keys}
    return {
        d.log.name: [ln for ln in d.output().splitlines() if any(m in ln for m in marks)]
        for d in daemons
    }


async def test_two_keepers_act_once_each_and_adopt_a_killed_keepers_send(
    anvil: AnvilProcess, chain: ChainControl, tmp_path: Path, database: str
) -> None:
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    cfg = write_config(
        tmp_path, "shared", [anvil.url], deployed, database=database, poll_interval=0.1, window=32,
        finality="confirmations", confirmations=4,
    )  # fmt: skip
    db = database
    daemons = cluster(tmp_path / "shared.toml", tmp_path, ["a", "b"], keys=KEYS)
    for d in daemons:
        d.env["KEEPER_KEEPER__CLAIM_SECONDS"] = str(CLAIM_SECONDS)
    a, b = daemons
    # deadlines fall due within a second or two of wall time; every keeper action is left
    # to the daemons
    gen = TrafficGenerator(
        anvil.url, deployed, VerdictBook(deployed.commerce), load_fixtures(),
        self_keep=False, timing=FAST,
    )  # fmt: skip
    traffic = None
    try:
        a.start()
        assert await a.wait_ready(60) is not None, a.tail()
        b.start()
        assert await b.wait_ready(60) is not None, b.tail()
        traffic = asyncio.create_task(gen.run())
        # both keepers share the work for a while, then one dies right after a broadcast
        victim = await _next_send(daemons, 4, 60)
        assert victim is not None, (a.tail(), b.tail())
        victim.kill()  # right after its broadcast, before any tick could settle it
        survivor = b if victim is a else a
        await asyncio.sleep(5.0)  # more traffic while the survivor works alone
        traffic.cancel()
        fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
        try:
            due: list[object] = []
            unsettled: list[object] = []
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                await asyncio.to_thread(chain.mine, 1)
                head = await asyncio.to_thread(chain.block_number)
                assert await survivor.wait_indexed(head, 60), survivor.tail()
                await asyncio.sleep(0.3)
                await fresh.to_head()
                adopt_silent_endings(db, fresh, anvil.url)
                due = list(await due_now(fresh, denied_in(db), hook_blocked_in(db)))
                unsettled = list(unsettled_intents(db))
                if not due and not unsettled:
                    break
                await asyncio.sleep(0.5)
            assert not due and not unsettled, (due[:5], unsettled[:5], survivor.tail())
            # the dead keeper's send was settled by the survivor, not sent again
            assert await logged(survivor, "keeper_intents_adopted", 1), survivor.tail()
            assert survivor.stop() == 0
            await fresh.to_head()
            adopt_silent_endings(db, fresh, anvil.url)
            mine = Harness(cfg)
            try:
                x, y = mine.dump(), fresh.dump()
            finally:
                await mine.close()
            assert all(x[t] == y[t] for t in CONTENT_TABLES), table_diff(x, y)
            repeats = effect_repeats(fresh.conn)  # refunds, timeouts: each happened once
            assert not repeats, repeats
        finally:
            await fresh.close()
        head = await asyncio.to_thread(chain.block_number)
        senders = [address_of(k) for k in KEYS]
        audits = [
            await asyncio.to_thread(audit_keeper, anvil.url, k, deployed.start_block, head)
            for k in senders
        ]
        assert audits[0].txs > 0 and audits[1].txs > 0, "both keepers sent"
        both = await asyncio.to_thread(audit_keeper, anvil.url, senders, deployed.start_block, head)
        # no send of an action after it took effect, by either signer, and each action
        # took effect once (a send that failed before it, then tried again, is only gas)
        assert both.duplicate_sends == 0 and both.double_executions == 0, both.repeats()
        assert all(both.effective[k] == 1 for k in both.mined), (both.mined, both.effective)
        acted, beside = _signed_beside_live(db)
        assert acted >= 5, acted  # the keepers had work
        if beside:
            history = _history(db, beside)
            raise AssertionError(
                ("signed beside a live attempt", history, _said(daemons, beside, history))
            )
    finally:
        if traffic is not None:
            traffic.cancel()
        kill_all(daemons)
