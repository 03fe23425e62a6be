"""Crashes, lost replies, forgetful nodes, stuck transactions and reorgs never double-send."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from erc8183_flows import Flows
from keeper_harness import (
    CLIENT,
    KEEPER_KEYS,
    Escrows,
    MakeKeeper,
    address_of,
    calldata,
    head,
    make_rpc,
    nonce_of,
    run,
)
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs
from support import keeper_books
from support.rpc_proxy import RpcProxy

from keeper.act import Keeper
from keeper.act.receipts import moved_subject
from keeper.domain.model import JobState, JobStatus, Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.errors import KeeperError
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.store.intents import Attempt

CHILD = Path(__file__).with_name("keeper_child.py")


def confirmed_counts(registry: CollectorRegistry) -> list[float]:
    """The keeper_actions_total samples with outcome=confirmed."""
    return [
        s.value
        for m in registry.collect()
        if m.name == "keeper_actions"
        for s in m.samples
        if s.name == "keeper_actions_total" and s.labels.get("outcome") == "confirmed"
    ]


def mined_again_behind_a_rival(escrows: Escrows, attempt: Attempt, job_id: str) -> Any:
    """Reorg out the block of our confirmed refund ``attempt``; the new block holds the
    client's own refund of ``job_id`` and then our stored bytes. Our new receipt."""
    assert attempt.receipt_block is not None
    refund = calldata("claimRefund(uint256)", int(job_id))
    theirs = {"from": address_of(CLIENT), "to": escrows.d.commerce, "data": refund}
    depth = escrows.control.block_number() - attempt.receipt_block + 1
    escrows.control.reorg(depth, [(theirs, 0), ("0x" + attempt.raw_tx.hex(), 0)])
    return escrows.control.call("eth_getTransactionReceipt", attempt.tx_hash)


def intent_receipt_hash(keeper: Keeper, intent_id: int) -> str:
    row = keeper.store.conn.execute(
        "SELECT receipt_hash FROM keeper_intents WHERE id = ?", (intent_id,)
    ).fetchone()
    return str(row[0])


def sends(proxy: RpcProxy) -> int:
    return sum(1 for method, _ in proxy.calls if method == "eth_sendRawTransaction")


class TestLostReply:
    """A send whose reply is lost is recognised as sent, not re-sent at a new nonce."""

    async def test_lost_reply_is_found_by_hash(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """The proxy forwards the raw tx and cuts the reply; the next tick finds the receipt."""
        ids = escrows.expired_jobs(1)
        async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as flaky:
            keeper = make_keeper(client=flaky)
            proxy.rules.on("eth_sendRawTransaction", drop_reply=1)
            await run(keeper, escrows, rpc, ids)
            [attempt] = keeper_books.all_attempts(keeper.store)
            assert attempt.status == "signed"  # we do not know whether it went out
            escrows.control.mine()
            await run(keeper, escrows, rpc, ids, ticks=2)
            assert sends(proxy) == 1
        [attempt] = keeper_books.all_attempts(keeper.store)
        [intent] = keeper_books.all_intents(keeper.store)
        assert (attempt.status, intent.outcome, intent.tx_hash) == (
            "confirmed",
            "confirmed",
            attempt.tx_hash,
        )
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 1


def _spawn(
    escrows: Escrows, url: str, db: Path, ids: list[str], jobs: list[JobState] | None = None
) -> subprocess.Popen[str]:
    """A keeper child ticking once over ``jobs`` (default: the commerce jobs ``ids``)."""
    states = escrows.jobs(ids) if jobs is None else jobs
    spec = {
        "db": str(db),
        "url": url,
        "multicall": escrows.d.multicall,
        "contracts": [[n, p.value, a] for n, p, a in escrows.d.escrows()],
        "jobs": [{**dataclasses.asdict(j), "status": int(j.status)} for j in states],
    }
    env = {**os.environ, "KEEPER_PRIVATE_KEY": KEEPER_KEYS[0]}
    return subprocess.Popen(
        [sys.executable, str(CHILD), json.dumps(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _attempt_hash(db: Path, timeout: float = 30.0) -> str:
    """Wait until the child has persisted its attempt; return the attempt's hash."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            conn = sqlite3.connect(db)
            try:
                row = conn.execute("SELECT tx_hash FROM keeper_attempts").fetchone()
            except sqlite3.OperationalError:
                row = None
            finally:
                conn.close()
            if row:
                return str(row[0])
        time.sleep(0.02)
    raise TimeoutError("the child never recorded an attempt")


def _kill_mid_send(
    child: subprocess.Popen[str], proxy: RpcProxy, escrows: Escrows, db: Path, forwarded: bool
) -> str:
    """SIGKILL the child once its attempt is persisted and its send is in the proxy's hands."""
    try:
        tx_hash = _attempt_hash(db)
        deadline = time.monotonic() + 10
        while sends(proxy) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        while forwarded and escrows.control.call("eth_getTransactionReceipt", tx_hash) is None:
            time.sleep(0.02)
        time.sleep(0.1)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert child.returncode == -signal.SIGKILL
    return tx_hash


class TestSigkill:
    """SIGKILL around the broadcast: after restart nothing is sent twice and no nonce gap stays."""

    @pytest.mark.parametrize(
        "forwarded", [False, True], ids=["before-broadcast", "after-broadcast"]
    )
    async def test_restart_settles_the_one_attempt(
        self,
        escrows: Escrows,
        rpc: RpcClient,
        make_keeper: MakeKeeper,
        tmp_path: Path,
        forwarded: bool,
    ) -> None:
        """The restarted keeper resends the stored bytes (or finds them mined), never a new tx."""
        ids = escrows.expired_jobs(2)
        db = tmp_path / "keeper0.db"
        with RpcProxy(escrows.url) as proxy:
            if forwarded:  # the node gets the tx; the reply never comes back
                proxy.rules.on(
                    "eth_sendRawTransaction", drop_reply=1, drop_mode="timeout", delay=60
                )
            else:  # the request hangs before it reaches the node
                proxy.rules.on("eth_sendRawTransaction", timeout=1, delay=60)
            tx_hash = _kill_mid_send(
                _spawn(escrows, proxy.url, db, ids), proxy, escrows, db, forwarded
            )
        # the proxy is gone: a hanging request can no longer reach the node
        mined_before = nonce_of(escrows, KEEPER_KEYS[0])
        assert mined_before == (1 if forwarded else 0)
        keeper = make_keeper(db=db)
        await keeper.recover()
        escrows.control.mine()
        await run(keeper, escrows, rpc, ids, ticks=2)
        [attempt] = keeper_books.all_attempts(keeper.store)
        assert attempt.tx_hash == tx_hash and attempt.status == "confirmed"
        assert {i.outcome for i in keeper_books.all_intents(keeper.store)} == {"confirmed"}
        assert (
            nonce_of(escrows, KEEPER_KEYS[0]) == 1 == nonce_of(escrows, KEEPER_KEYS[0], "pending")
        )
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))


class TestSigkillERC8183:
    """The same crash on the ERC8183 dialect: claimRefund(uint256,bytes), partly settled."""

    @pytest.mark.parametrize(
        "forwarded", [False, True], ids=["before-broadcast", "after-broadcast"]
    )
    async def test_one_refund_of_budget_minus_settled(
        self,
        escrows: Escrows,
        rpc: RpcClient,
        make_keeper: MakeKeeper,
        tmp_path: Path,
        forwarded: bool,
    ) -> None:
        """Killed mid-send and restarted: one attempt, one refund of exactly 600 of 900."""
        flows = Flows(escrows, tmp_path)
        try:
            job = flows.job(600)
            flows.approve(flows.submit_claim(job, 300))
            (state,) = await flows.jobs()
            escrows.control.mine_at(state.expired_at)
            jobs = await flows.jobs()
            before = flows.balance(address_of(CLIENT))
            db = tmp_path / "keeper0.db"
            with RpcProxy(escrows.url) as proxy:
                if forwarded:
                    proxy.rules.on(
                        "eth_sendRawTransaction", drop_reply=1, drop_mode="timeout", delay=60
                    )
                else:
                    proxy.rules.on("eth_sendRawTransaction", timeout=1, delay=60)
                child = _spawn(escrows, proxy.url, db, [], jobs)
                tx_hash = _kill_mid_send(child, proxy, escrows, db, forwarded)
            keeper = make_keeper(db=db)
            await keeper.recover()
            for _ in range(3):
                escrows.control.mine()
                await flows.tick(keeper, rpc)
            [attempt] = keeper_books.all_attempts(keeper.store)
            assert attempt.tx_hash == tx_hash and attempt.status == "confirmed"
            assert nonce_of(escrows, KEEPER_KEYS[0]) == 1
            assert flows.status(job) == 5
            assert flows.balance(address_of(CLIENT)) - before == 600
        finally:
            await flows.index.close()


class TestCrashBeforeSimulation:
    """An intent written just before the process died is decided again or ended, never left."""

    async def test_stale_intents_end_or_proceed(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
    ) -> None:
        """Job 1 was refunded by someone else meanwhile: its intent ends preempted. Job 2 is
        still due: its intent goes on to a confirmed refund. Nothing stays open."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(2, expiry)
        escrows.control.mine_at(expiry)
        db = tmp_path / "keeper0.db"
        crashed = make_keeper(db=db)
        at = await head(rpc)
        crashed.store.open_decisions(
            [
                Action(escrows.d.commerce, i, ActionKind.CLAIM_REFUND, expiry, Protocol.ERC8183)
                for i in ids
            ],
            at.number,
            at.hash,
        )  # the write that precedes the simulation; the process dies here
        escrows.call(CLIENT, escrows.d.commerce, "claimRefund(uint256)", int(ids[0]))
        keeper = make_keeper(db=db)
        await keeper.recover()
        for _ in range(2):
            await run(keeper, escrows, rpc, ids)
            escrows.control.mine()
        outcomes = {
            i.subject: (i.status, i.outcome) for i in keeper_books.all_intents(keeper.store)
        }
        assert outcomes == {ids[0]: ("done", "preempted"), ids[1]: ("done", "confirmed")}
        assert keeper.store.open_intents() == []
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))


class TestForgetfulNode:
    """A node that forgets a pending tx gets the same raw bytes again."""

    async def test_dropped_from_pool_is_rebroadcast(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """After anvil drops the pending tx, the keeper resends the identical bytes."""
        ids = escrows.expired_jobs(1)
        keeper = make_keeper()
        escrows.control.set_automine(False)
        try:
            await run(keeper, escrows, rpc, ids)
            [attempt] = keeper_books.all_attempts(keeper.store)
            escrows.control.drop_transaction(attempt.tx_hash)
            assert escrows.control.call("eth_getTransactionByHash", attempt.tx_hash) is None
            await run(keeper, escrows, rpc, ids)
            assert escrows.control.call("eth_getTransactionByHash", attempt.tx_hash) is not None
            escrows.control.mine()
        finally:
            escrows.control.set_automine(True)
        escrows.control.mine()
        await run(keeper, escrows, rpc, ids)
        [again] = keeper_books.all_attempts(keeper.store)
        assert again.tx_hash == attempt.tx_hash and again.status == "confirmed"


class TestMalformedAnswers:
    """A node's answer no chain can give is a bad answer, asked again: never signed into a
    transaction, nor an error inside the keeper (a value past 2**63 - 1 failed the books'
    SQLite write, a fee that is not hex the fee decision: errors the daemon's keep loop
    does not expect, and they ended it)."""

    @pytest.mark.parametrize(
        ("method", "fault"),
        [
            ("eth_getTransactionReceipt", {"huge_quantity": 3}),
            ("eth_estimateGas", {"huge_quantity": 3}),
            ("eth_getTransactionCount", {"huge_quantity": 3}),
            ("eth_feeHistory", {"patched": 3, "patch": {"baseFeePerGas": ["0xzz"]}}),
            ("eth_feeHistory", {"patched": 3, "patch": {"reward": [["0x1"], "0x2"]}}),
        ],
        ids=["receipt-block", "gas-estimate", "nonce", "base-fee", "rewards"],
    )
    async def test_the_answer_is_asked_again_and_the_refund_sent_once(
        self,
        escrows: Escrows,
        rpc: RpcClient,
        make_keeper: MakeKeeper,
        method: str,
        fault: dict[str, Any],
    ) -> None:
        """The tick fails as on any bad answer (the daemon logs it) and a later one goes
        on; the one refund is sent and confirmed."""
        ids = escrows.expired_jobs(1)
        failed = []
        async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as client:
            keeper = make_keeper(client=client)
            proxy.rules.on(method, **fault)
            for _ in range(6):
                try:  # as the daemon's keep loop does
                    await keeper.tick(await head(rpc), escrows.jobs(ids), [])
                except KeeperError as exc:
                    failed.append(exc)
                escrows.control.mine()
            budget = next(k for k in fault if k != "patch")
            assert proxy.count(budget, method) == 3
        assert failed and all(method in str(e) for e in failed), failed
        [attempt] = keeper_books.all_attempts(keeper.store)
        assert attempt.status == "confirmed" and attempt.gas_limit < 10**6
        [intent] = keeper_books.all_intents(keeper.store)
        assert intent.outcome == "confirmed"
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED


class TestStuck:
    """A transaction stuck below the base fee is replaced, or cancelled once obsolete."""

    async def _stuck(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> tuple[Keeper, list[str]]:
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(1, expiry)
        escrows.control.set_base_fee(10**9)
        escrows.control.mine_at(expiry)
        keeper = make_keeper()
        escrows.control.set_automine(False)
        await run(keeper, escrows, rpc, ids)
        [first] = keeper_books.all_attempts(keeper.store)
        # the base fee jumps above what the pending tx offers: it cannot be included
        escrows.control.set_base_fee(first.max_fee + 10**9)
        escrows.control.mine()
        assert escrows.control.call("eth_getTransactionReceipt", first.tx_hash) is None
        return keeper, ids

    async def test_stuck_tx_is_replaced_with_higher_fees(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """After bump_after_blocks the same call is re-signed at the same nonce with >= 12.5%."""
        keeper, ids = await self._stuck(escrows, rpc, make_keeper)
        try:
            for _ in range(keeper.settings.bump_after_blocks):
                await run(keeper, escrows, rpc, ids)
                escrows.control.mine()
        finally:
            escrows.control.set_automine(True)
        for _ in range(2):
            escrows.control.mine()
            await run(keeper, escrows, rpc, ids)
        attempts = keeper_books.all_attempts(keeper.store)
        assert len(attempts) == 2 and attempts[0].nonce == attempts[1].nonce == 0
        assert attempts[1].max_fee * 8 >= attempts[0].max_fee * 9
        assert attempts[1].tip * 8 >= attempts[0].tip * 9
        assert [a.status for a in attempts] == ["replaced", "confirmed"]
        assert keeper_books.all_intents(keeper.store)[0].tx_hash == attempts[1].tx_hash

    async def test_obsolete_stuck_tx_is_cancelled(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """When a rival settles the job first, the stuck nonce is spent on a self-transfer."""
        keeper, ids = await self._stuck(escrows, rpc, make_keeper)
        try:
            rival = make_keeper(1)
            await rival.tick(await head(rpc), escrows.jobs(ids), [])
            escrows.control.mine()
            assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
            for _ in range(keeper.settings.bump_after_blocks):
                await run(keeper, escrows, rpc, ids)
                escrows.control.mine()
        finally:
            escrows.control.set_automine(True)
        for _ in range(2):
            escrows.control.mine()
            await run(keeper, escrows, rpc, ids)
        attempts = keeper_books.all_attempts(keeper.store)
        assert [(a.kind, a.status) for a in attempts] == [
            ("batch", "replaced"),  # alone, but through Multicall3 (allowFailure)
            ("cancel", "confirmed"),
        ]
        assert attempts[1].to_address == address_of(KEEPER_KEYS[0])
        assert keeper_books.all_intents(keeper.store)[0].outcome == "preempted"
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 1

    async def test_replacement_failing_at_its_estimate_is_a_cancel_at_once(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """The refund priced out by the base fee is to be replaced and still passes the
        replacement's simulation, then a rival's refund is mined before the replacement's
        gas estimate, which reverts: the nonce is spent on a cancel in that same tick (not
        left holding later transactions), counted as a replacement."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(1, expiry)
        escrows.control.set_base_fee(10**9)
        escrows.control.mine_at(expiry)
        refund = calldata("claimRefund(uint256)", int(ids[0]))
        armed: list[bool] = []
        raced: list[str] = []

        def race(params: list[Any], result: Any) -> Any:
            """Once armed, the fee history the replacement is priced from is answered, then
            the rival's refund is mined: after the simulation, before the estimate."""
            if armed and not raced:
                raced.append(escrows.send(CLIENT, escrows.d.commerce, refund))
                escrows.control.mine()
            return result

        registry = CollectorRegistry()
        async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as client:
            keeper = make_keeper(client=client, metrics=Metrics(registry))
            proxy.rules.on("eth_feeHistory", patched=10_000, patch=race)
            escrows.control.set_automine(False)
            try:
                await run(keeper, escrows, rpc, ids)
                [first] = keeper_books.all_attempts(keeper.store)
                escrows.control.set_base_fee(first.max_fee + 10**9)
                escrows.control.mine()
                armed.append(True)
                for _ in range(keeper.settings.bump_after_blocks + 1):
                    summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
                    if raced:
                        break
                    escrows.control.mine()
            finally:
                escrows.control.set_automine(True)
            assert raced and summary.sent == 1
            attempts = keeper_books.all_attempts(keeper.store)
            assert [(a.kind, a.nonce) for a in attempts] == [("batch", 0), ("cancel", 0)]
            for _ in range(2):
                escrows.control.mine()
                await run(keeper, escrows, rpc, ids)
        assert [a.status for a in keeper_books.all_attempts(keeper.store)] == [
            "replaced",
            "confirmed",
        ]
        assert registry.get_sample_value("keeper_tx_replacements_total") == 1
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 1
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED


class TestRefusedAsUnderpriced:
    """A first send refused as underpriced is signed again at the same nonce with higher fees."""

    @pytest.mark.parametrize("client", ["geth", "nethermind"])
    async def test_the_next_signature_at_that_nonce_is_bumped(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, client: str
    ) -> None:
        """A node with a minimum price above the market suggestion refuses the same fees
        forever; each new signature at the refused nonce must offer >= 12.5% more."""
        ids = escrows.expired_jobs(1)
        async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as picky:
            keeper = make_keeper(client=picky, redecide_after_blocks=0)
            proxy.rules.reject_tx("underpriced", client=client, count=2)
            for _ in range(4):
                await run(keeper, escrows, rpc, ids)
                escrows.control.mine()
        attempts = keeper_books.all_attempts(keeper.store)
        assert [a.status for a in attempts] == ["failed", "failed", "confirmed"]
        assert {a.nonce for a in attempts} == {0}
        for before, after in itertools.pairwise(attempts):
            assert after.max_fee * 8 >= before.max_fee * 9
            assert after.tip * 8 >= before.tip * 9
        assert keeper_books.all_intents(keeper.store)[0].outcome == "confirmed"
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED


class TestReorg:
    """A confirmed refund whose block is reorged out is executed again."""

    async def test_reorged_out_refund_is_reexecuted(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """After anvil_reorg removes the refund's block, the keeper sends it again and confirms;
        keeper_actions_total counts the action confirmed once, not once per confirmation."""
        ids = escrows.expired_jobs(1)
        registry = CollectorRegistry()
        keeper = make_keeper(metrics=Metrics(registry))
        await run(keeper, escrows, rpc, ids, ticks=2)
        [intent] = keeper_books.all_intents(keeper.store)
        assert intent.outcome == "confirmed"
        escrows.control.reorg(2)  # replaces the refund's block and the one after it
        assert escrows.control.call("eth_getTransactionReceipt", intent.tx_hash) is None
        assert escrows.jobs(ids)[0].status is JobStatus.FUNDED
        with capture_logs() as logs:
            await run(keeper, escrows, rpc, ids, ticks=2)
        reorged = [e for e in logs if e["event"] == "keeper_confirmed_tx_reorged"]
        assert [(e["tx_hash"], e["log_level"]) for e in reorged] == [(intent.tx_hash, "warning")]
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
        [again] = keeper_books.all_intents(keeper.store)
        assert again.outcome == "confirmed"
        assert escrows.control.call("eth_getTransactionReceipt", again.tx_hash) is not None
        assert confirmed_counts(registry) == [1.0]
        timed = registry.get_sample_value(
            "keeper_action_delay_seconds_count", {"action": "claimRefund"}
        )
        assert timed == 1  # one action, timed once, however many times it was confirmed

    async def test_refund_mined_again_behind_a_competitor_is_not_left_confirmed(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """A reorg's new block holds another party's refund of the job and then our own
        Multicall3 batch: ours is mined again, so the signer's count never drops, but its
        refund call fails inside the batch. The keeper sees its confirmed block gone, reads
        the new receipt (no JobExpired of ours) and ends the intent preempted, sending
        nothing more. An earlier refund, in a block the reorg left, stays confirmed (and
        does not end the watch before the later one)."""
        earlier, later = escrows.expired_jobs(2)
        keeper = make_keeper()
        await run(keeper, escrows, rpc, [earlier], ticks=2)
        escrows.control.mine()
        await run(keeper, escrows, rpc, [later], ticks=2)
        first, attempt = keeper_books.all_attempts(keeper.store)
        assert first.status == attempt.status == "confirmed"
        assert attempt.receipt_block is not None and first.receipt_block is not None
        assert first.receipt_block < attempt.receipt_block
        again = mined_again_behind_a_rival(escrows, attempt, later)
        assert again["blockHash"] != attempt.receipt_hash and attempt.kind == "batch"
        assert not moved_subject(again, escrows.d.commerce, later)
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 2  # the count alone shows nothing
        for _ in range(3):
            await run(keeper, escrows, rpc, [earlier, later])
            escrows.control.mine()
        intents = {i.subject: i for i in keeper_books.all_intents(keeper.store)}
        assert (intents[earlier].status, intents[earlier].outcome) == ("done", "confirmed")
        assert (intents[later].status, intents[later].outcome) == ("done", "preempted")
        assert intents[later].detail == "call failed inside the batch"  # the new receipt
        first_now, attempt = keeper_books.all_attempts(keeper.store)
        assert first_now == first
        assert (attempt.status, attempt.receipt_hash) == ("confirmed", again["blockHash"])
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 2
        assert escrows.jobs([later])[0].status is JobStatus.EXPIRED

    async def test_lone_refund_mined_again_behind_a_competitor_ends_reverted(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """As above without Multicall3: the refund is its own call, so mined again behind
        the other party's it reverts on chain, and the intent ends reverted."""
        ids = escrows.expired_jobs(1)
        keeper = make_keeper(multicall=escrows.d.treasury)  # an account: no batching
        await run(keeper, escrows, rpc, ids, ticks=2)
        [attempt] = keeper_books.all_attempts(keeper.store)
        assert (attempt.kind, attempt.status) == ("call", "confirmed")
        assert attempt.receipt_block is not None
        again = mined_again_behind_a_rival(escrows, attempt, ids[0])
        assert again["status"] == "0x0"
        for _ in range(3):
            await run(keeper, escrows, rpc, ids)
            escrows.control.mine()
        [intent] = keeper_books.all_intents(keeper.store)
        assert (intent.status, intent.outcome) == ("done", "reverted")
        assert intent.detail == "transaction reverted on chain"
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 1
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED

    async def test_reconfirmation_after_a_fee_cap_hold_is_counted_once(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Reorged out, then held at the fee cap (which rewrites the intent's detail), then
        confirmed again: keeper_actions_total still counts one confirmation."""
        ids = escrows.expired_jobs(1)
        registry = CollectorRegistry()
        keeper = make_keeper(metrics=Metrics(registry), max_fee_cap=20 * 10**9)
        await run(keeper, escrows, rpc, ids, ticks=2)
        assert keeper_books.all_intents(keeper.store)[0].outcome == "confirmed"
        escrows.control.set_automine(False)
        escrows.control.reorg(2)  # the refund's block goes; its tx is pending again
        escrows.control.set_base_fee(50 * 10**9)
        escrows.control.mine()
        held = False
        for _ in range(6):  # the pending tx cannot pay 50 gwei: a replacement is capped
            await run(keeper, escrows, rpc, ids)
            held = held or keeper_books.all_intents(keeper.store)[0].outcome == "fee_cap"
            escrows.control.mine()
        assert held
        assert escrows.jobs(ids)[0].status is JobStatus.FUNDED
        escrows.control.set_base_fee(10**9)
        escrows.control.set_automine(True)
        for _ in range(4):
            escrows.control.mine()
            await run(keeper, escrows, rpc, ids)
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
        assert keeper_books.all_intents(keeper.store)[0].outcome == "confirmed"
        assert confirmed_counts(registry) == [1.0]

    async def test_reorg_beyond_the_watch_window_is_caught_by_the_nonce(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """A keeper that slept through a reorg older than its watch window still re-executes."""
        ids = escrows.expired_jobs(1)
        keeper = make_keeper(reorg_watch_blocks=2)
        await run(keeper, escrows, rpc, ids, ticks=2)
        assert keeper_books.all_intents(keeper.store)[0].outcome == "confirmed"
        escrows.control.mine(4)
        escrows.control.reorg(6)  # the refund's block goes, 6 blocks deep
        escrows.control.mine(4)  # ... and the keeper only wakes up 4 blocks later
        assert escrows.jobs(ids)[0].status is JobStatus.FUNDED
        for _ in range(3):
            await run(keeper, escrows, rpc, ids)
            escrows.control.mine()
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
        assert keeper_books.all_intents(keeper.store)[0].outcome == "confirmed"
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 1


class TestNonceGap:
    """A nonce spent by someone else and then freed by a reorg is filled, not waited on."""

    async def test_gap_with_no_new_work_is_cancelled(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """The node refuses our nonce-0 refund and takes the nonce-1 one; then another party
        refunds the first job. Nothing is due any more, yet nonce 0 must be spent or the
        nonce-1 refund waits behind it forever: the keeper cancels at nonce 0."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(2, expiry)
        escrows.control.mine_at(expiry)
        async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as client:
            keeper = make_keeper(client=client, batch_size=1)
            proxy.rules.reject_tx("underpriced")
            # the refused broadcast is not counted as sent
            assert (await keeper.tick(await head(rpc), escrows.jobs(ids), [])).sent == 1
            [refused] = keeper.store.attempts_at(keeper.address, 0)
            assert refused.status == "failed"
            [freed] = [i for i in keeper_books.all_intents(keeper.store) if i.subject == ids[0]]
            assert (freed.status, freed.detail) == ("open", "send refused: underpriced")
            escrows.call(CLIENT, escrows.d.commerce, "claimRefund(uint256)", int(ids[0]))
            assert nonce_of(escrows, KEEPER_KEYS[0]) == 0  # nonce 1 waits behind the gap
            for _ in range(3):
                await run(keeper, escrows, rpc, ids)
                escrows.control.mine()
        assert [a.kind for a in keeper.store.attempts_at(keeper.address, 0)] == ["batch", "cancel"]
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 2
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))
        assert keeper.store.open_nonces(keeper.address) == {}

    async def test_freed_nonce_is_filled_after_reorg(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Our tx at nonce 1 loses to a foreign one, a reorg frees nonce 1: no nonce stays stuck."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(2, expiry)
        keeper = make_keeper(batch_size=1)
        escrows.control.mine_at(expiry)
        escrows.control.set_automine(False)
        try:
            assert (await keeper.tick(await head(rpc), escrows.jobs(ids), [])).sent == 2
            ours = keeper.store.attempts_at(keeper.address, 1)[0]
            # the same key used elsewhere outbids our nonce-1 transaction in the pool
            foreign = escrows.send_with_nonce(
                KEEPER_KEYS[0], keeper.address, "0x", 1, 10 * ours.max_fee
            )
            escrows.control.mine()
        finally:
            escrows.control.set_automine(True)
        assert escrows.control.call("eth_getTransactionReceipt", foreign) is not None
        escrows.control.mine()
        await run(keeper, escrows, rpc, ids)
        assert keeper.store.attempts_at(keeper.address, 1)[0].status == "dropped"
        [lost] = [i for i in keeper_books.all_intents(keeper.store) if i.subject == ids[1]]
        assert (lost.outcome, lost.detail) == ("dropped", "nonce used by another transaction")
        escrows.control.reorg(2)  # takes out both our nonce 0 and the foreign nonce 1
        for _ in range(keeper.settings.redecide_after_blocks + 3):
            await run(keeper, escrows, rpc, ids)
            escrows.control.mine()
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))
        pending = nonce_of(escrows, KEEPER_KEYS[0], "pending")
        assert nonce_of(escrows, KEEPER_KEYS[0]) == pending  # nothing left waiting in the pool
        assert keeper.store.open_nonces(keeper.address) == {}


@pytest.mark.parametrize("seed", [1, 2, pytest.param(3, marks=pytest.mark.slow)])
async def test_random_reorgs_settle_every_refund_once(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, seed: int
) -> None:
    """Under random reorgs (time going back too), every job ends refunded, no nonce stuck."""
    rng = random.Random(seed)
    start = escrows.now()
    ids: list[str] = []
    for k in range(10):
        ids += escrows.funded_jobs(1, start + 100 + 40 * k)
    escrows.control.mine(13)
    multicall = None if seed % 2 else escrows.d.multicall  # single calls and batches
    keeper = make_keeper(confirmations=2, batch_size=3, multicall=multicall)
    for _ in range(40):
        escrows.control.increase_time(rng.randint(5, 40))
        await run(keeper, escrows, rpc, ids)
        if rng.random() < 0.5:
            escrows.control.reorg(rng.randint(1, 6))
        await run(keeper, escrows, rpc, ids)
    escrows.control.increase_time(1000)
    for _ in range(keeper.settings.redecide_after_blocks * 3):
        escrows.control.mine()
        await run(keeper, escrows, rpc, ids)
    assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))
    assert keeper.store.open_nonces(keeper.address) == {}
    assert nonce_of(escrows, KEEPER_KEYS[0]) == nonce_of(escrows, KEEPER_KEYS[0], "pending")
    intents = keeper_books.all_intents(keeper.store)
    assert sorted(i.subject for i in intents) == sorted(ids)
    assert {i.outcome for i in intents} == {"confirmed"}
    for intent in intents:  # the recorded refund is the one on the surviving chain
        receipt = escrows.control.call("eth_getTransactionReceipt", intent.tx_hash)
        assert receipt is not None and receipt["blockHash"] == intent_receipt_hash(
            keeper, intent.id
        )
