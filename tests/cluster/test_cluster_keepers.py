"""Two keepers (two signers, two ``keeper run`` daemons) on one database share the work once.

The traffic leaves every refund, finalisation and timeout to the daemons.
One keeper is SIGKILLed right after it broadcasts a transaction, before it
can settle it; the other adopts the dead keeper's in-flight intents once
their claim runs out and settles them from the chain. The audit walks every
block: each action has exactly one mined transaction across both signers
(anvil mines everything it is sent, so a second signed transaction for an
action would show up here), and the tables equal a fresh index. On one
SQLite file and on one PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from cluster_support import cluster, kill_all, logged
from rel_audit import (
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


def _signed_per_action(db: str) -> Counter[tuple[str, str, str]]:
    """Distinct (signer, nonce) pairs that carried each action (fee bumps share one)."""
    conn = connect(db)
    try:
        rows = conn.execute(
            "SELECT i.contract, i.subject, i.action, COUNT(DISTINCT a.signer || ':' || a.nonce) "
            "FROM keeper_intents i JOIN keeper_attempt_intents l ON l.intent_id = i.id "
            "JOIN keeper_attempts a ON a.id = l.attempt_id WHERE a.status != 'failed' "
            "GROUP BY i.id"
        ).fetchall()
        return Counter({(str(c), str(s), str(a)): int(n) for c, s, a, n in rows})
    finally:
        conn.close()


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
            out.append({"intent": tuple(intent), "attempts": [tuple(a) for a in attempts]})
        return out
    finally:
        conn.close()


def _said(daemons: list[DaemonProc], history: list[dict[str, object]]) -> dict[str, list[str]]:
    """Each daemon's log lines that name one of the attempts in ``history``."""
    hashes = {str(a[0]) for h in history for a in h["attempts"]}  # type: ignore[attr-defined]
    return {
        d.log.name: [ln for ln in d.output().splitlines() if any(x in ln for x in hashes)]
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
        audits = [
            await asyncio.to_thread(
                audit_keeper, anvil.url, address_of(k), deployed.start_block, head
            )
            for k in KEYS
        ]
        mined = audits[0].mined + audits[1].mined
        effective = audits[0].effective + audits[1].effective
        assert audits[0].txs > 0 and audits[1].txs > 0, "both keepers sent"
        repeated = {k: n for k, n in mined.items() if n > 1}
        assert not repeated, repeated  # no action in a second transaction, by either signer
        assert all(effective[k] == 1 for k in mined), (mined, effective)
        signed = _signed_per_action(db)
        assert len(signed) >= 5, signed  # the keepers had work
        twice = [k for k, n in signed.items() if n > 1]
        if twice:
            history = _history(db, twice)
            raise AssertionError(("signed twice", history, _said(daemons, history)))
    finally:
        if traffic is not None:
            traffic.cancel()
        kill_all(daemons)
