"""The manager's own bookkeeping, on a real anvil: what it reports before its first tick, when
it may run without a signer, and which intents one tick decides, ends or leaves alone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from erc8183_flows import indexer  # the daemon's indexer over chosen contracts
from eth_account import Account
from eth_typing import HexStr
from keeper_harness import (
    CLIENT,
    DEPLOYER,
    KEEPER_KEYS,
    Escrows,
    MakeKeeper,
    address_of,
    head,
    make_rpc,
    nonce_of,
    open_db,
    run,
)
from prometheus_client import CollectorRegistry
from support import keeper_books
from support.rpc_proxy import RpcProxy
from web3 import Web3

from keeper.act import Keeper, KeeperSettings
from keeper.act.simulate import CALLS_AT_ONCE
from keeper.config import ContractConfig, KeeperConfig
from keeper.devnet.deploy import deploy_contract
from keeper.domain.model import JobStatus, Protocol
from keeper.domain.planner import Action, ActionKind
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.rpc.errors import RpcError

E = Protocol.ERC8183


async def test_only_a_dry_run_keeper_may_have_no_signer(rpc: RpcClient, tmp_path: Path) -> None:
    """A sending keeper without a signer is refused at construction; a dry-run one is not."""
    db = open_db(tmp_path / "k.db")
    with pytest.raises(ValueError, match="a signer is required unless dry_run is set"):
        Keeper(
            settings=KeeperSettings(max_fee_cap=10**11), chain_id=31337, rpc=rpc, db=db, signer=None
        )
    keeper = Keeper(
        settings=KeeperSettings(max_fee_cap=10**11, dry_run=True),
        chain_id=31337,
        rpc=rpc,
        db=db,
        signer=None,
    )
    assert keeper.signer is None and keeper.store.claims is None


async def test_before_its_first_tick_a_keeper_has_no_summary_and_is_ready_once_recovered(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """The daemon's status and readiness read the keeper before it has ticked: no summary,
    the balance not known to be low, ready as soon as recover() has run; then the summary
    is the last tick's."""
    keeper = make_keeper()
    assert keeper.last is None and keeper.balance_ok and not keeper.ready
    await keeper.recover()
    assert keeper.ready and keeper.last is None
    summary = await keeper.tick(await head(rpc), [], [])
    assert keeper.last is summary and keeper.ready


async def test_the_balance_at_the_minimum_is_enough_and_is_published(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """min_balance_wei itself is enough to send; one wei less is not. Each tick publishes the
    signer's balance as keeper_signer_balance_wei (the SignerBalanceLow alert's input)."""
    registry = CollectorRegistry()
    keeper = make_keeper(min_balance_wei=10**15, metrics=Metrics(registry))  # exact as a float
    escrows.control.set_balance(keeper.address, 10**15)
    escrows.control.mine()
    summary = await keeper.tick(await head(rpc), [], [])
    assert summary.balance_ok and keeper.ready
    assert registry.get_sample_value("keeper_signer_balance_wei") == 10**15
    escrows.control.set_balance(keeper.address, 10**15 - 1)
    escrows.control.mine()
    summary = await keeper.tick(await head(rpc), [], [])
    assert not summary.balance_ok and not keeper.ready
    assert registry.get_sample_value("keeper_signer_balance_wei") == 10**15 - 1


async def test_at_the_fee_cap_nothing_is_simulated_or_signed(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """Fees above the cap hold the decision before the simulation gate: no eth_call is
    spent on a send that cannot go out, the intent waits open saying why, and once fees
    fall the refund goes out at the first nonce."""
    ids = escrows.expired_jobs(1)
    keeper = make_keeper(max_fee_cap=20 * 10**9)
    escrows.control.set_base_fee(50 * 10**9)
    escrows.control.mine()
    summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
    assert summary.fee_cap and summary.simulated == [] and summary.sent == 0
    [intent] = keeper_books.all_intents(keeper.store)
    assert (intent.status, intent.outcome) == ("open", "fee_cap")
    assert intent.detail is not None and intent.detail.startswith("sending needs ")
    escrows.control.set_base_fee(10**9)
    escrows.control.mine()
    summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
    assert summary.sent == 1 and not summary.fee_cap
    # the gate's two simulations, at the decision block and at latest, are both reported
    assert [r.verdict for r in summary.simulated] == ["ok", "ok"]
    [attempt] = keeper_books.all_attempts(keeper.store)
    assert attempt.nonce == 0


async def test_a_preempted_intent_is_decided_again_after_redecide_blocks_not_before(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """Someone else refunded the job and the projection has not caught up: the gate ends
    the intent preempted, and that projection is not simulated again until
    redecide_after_blocks heads later, exactly."""
    ids = escrows.expired_jobs(1)
    stale = escrows.jobs(ids)  # still Funded: what a lagging index would hand the keeper
    escrows.call(CLIENT, escrows.d.commerce, "claimRefund(uint256)", int(ids[0]))
    keeper = make_keeper()
    first = await head(rpc)
    summary = await keeper.tick(first, stale, [])
    assert (summary.planned, summary.sent) == (1, 0)
    [intent] = keeper_books.all_intents(keeper.store)
    assert (intent.status, intent.outcome, intent.decided_block) == (
        "done",
        "preempted",
        first.number,
    )
    wait = keeper.settings.redecide_after_blocks
    for _ in range(wait - 1):
        escrows.control.mine()
        summary = await keeper.tick(await head(rpc), stale, [])
        assert (summary.planned, summary.simulated) == (0, [])
    escrows.control.mine()
    summary = await keeper.tick(await head(rpc), stale, [])
    assert summary.planned == 1 and [r.verdict for r in summary.simulated] == ["preempted"]
    [intent] = keeper_books.all_intents(keeper.store)
    assert (intent.outcome, intent.decided_block) == ("preempted", first.number + wait)
    assert keeper_books.all_attempts(keeper.store) == []


async def test_a_confirmed_intent_is_never_planned_again(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """A projection still showing the refunded job as due (the index behind) plans nothing
    for it once its refund is confirmed, however many blocks pass."""
    ids = escrows.expired_jobs(1)
    stale = escrows.jobs(ids)
    keeper = make_keeper()
    await run(keeper, escrows, rpc, ids, ticks=2)
    [intent] = keeper_books.all_intents(keeper.store)
    assert intent.outcome == "confirmed"
    for _ in range(keeper.settings.redecide_after_blocks + 1):
        escrows.control.mine()
        summary = await keeper.tick(await head(rpc), stale, [])
        assert (summary.planned, summary.simulated, summary.sent) == (0, [], 0)
    assert keeper_books.all_intents(keeper.store) == [intent]


async def test_a_dry_run_keeper_settles_nothing_and_without_a_signer_reads_no_balance(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """dry_run simulates only: no nonce is read or settled and nothing is sent; without a
    signer there is no balance to check either, and the keeper stays ready."""
    ids = escrows.expired_jobs(1)
    async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url) as client:
        with_key = make_keeper(client=client, dry_run=True)
        summary = await with_key.tick(await head(rpc), escrows.jobs(ids), [])
        assert [r.verdict for r in summary.simulated] == ["ok"] and summary.sent == 0
        assert len(proxy.requests_for("eth_getBalance")) == 1
        keyless = Keeper(
            settings=KeeperSettings(
                max_fee_cap=10**11, dry_run=True, multicall=escrows.d.multicall
            ),
            chain_id=31337,
            rpc=client,
            db=open_db(tmp_path / "keyless.db"),
            signer=None,
            contracts=escrows.d.contract_configs(),
        )
        summary = await keyless.tick(await head(rpc), escrows.jobs(ids), [])
        assert [r.verdict for r in summary.simulated] == ["ok"] and summary.balance_ok
        assert keyless.ready
        assert len(proxy.requests_for("eth_getBalance")) == 1  # the keyed keeper's only
        assert proxy.requests_for("eth_getTransactionCount") == []
        assert proxy.requests_for("eth_sendRawTransaction") == []
    assert keeper_books.all_intents(with_key.store) == []
    assert keeper_books.all_intents(keyless.store) == []


async def test_an_open_intent_no_longer_planned_ends_preempted_and_dry_run_leaves_it(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """An intent written just before its simulation (the process died there), whose job
    someone else refunded since: a dry-run keeper on the same database leaves it alone;
    the next sending tick ends it preempted, saying why."""
    ids = escrows.expired_jobs(1)
    [job] = escrows.jobs(ids)
    db = tmp_path / "shared.db"
    crashed = make_keeper(db=db)
    at = await head(rpc)
    refund = Action(job.contract, job.job_id, ActionKind.CLAIM_REFUND, job.expired_at, E)
    crashed.store.open_decisions([refund], at.number, at.hash)
    escrows.call(CLIENT, escrows.d.commerce, "claimRefund(uint256)", int(ids[0]))
    dry = make_keeper(db=db, dry_run=True)
    await dry.tick(await head(rpc), escrows.jobs(ids), [])
    [intent] = keeper_books.all_intents(dry.store)
    assert (intent.status, intent.outcome) == ("open", None)
    keeper = make_keeper(db=db)
    summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
    assert summary.planned == 0
    [intent] = keeper_books.all_intents(keeper.store)
    assert (intent.status, intent.outcome, intent.detail) == (
        "done",
        "preempted",
        "no longer due when planned again",
    )
    assert keeper_books.all_attempts(keeper.store) == []


async def test_from_config_hands_on_the_metrics_and_the_reorg_window(
    escrows: Escrows, rpc: RpcClient, tmp_path: Path
) -> None:
    """The daemon's constructor passes its metrics (the tick publishes the signer's balance
    there) and the chain's block window (the reorg watch's depth) on to the keeper."""
    registry = CollectorRegistry()
    keeper = Keeper.from_config(
        KeeperConfig(enabled=True, private_key_env="KP"),
        chain_id=31337,
        rpc=rpc,
        db=open_db(tmp_path / "k.db"),
        multicall=escrows.d.multicall,
        metrics=Metrics(registry),
        environ={"KP": KEEPER_KEYS[2]},
        reorg_watch_blocks=64,
        contracts=escrows.d.contract_configs(),
    )
    assert keeper.settings.reorg_watch_blocks == 64
    await keeper.tick(await head(rpc), [], [])
    balance = int(escrows.control.call("eth_getBalance", keeper.address, "latest"), 16)
    assert balance > 0
    assert registry.get_sample_value("keeper_signer_balance_wei") == balance


async def test_recover_after_the_daemons_detection_does_not_detect_again(
    escrows: Escrows, make_keeper: MakeKeeper
) -> None:
    """The daemon detects every dialect at start-up, then recovers: recover() reuses that
    book (no second round of detection calls); a keeper never detected detects there."""
    async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url) as client:
        keeper = make_keeper(client=client)
        book = await keeper.detect_dialects()
        calls = len(proxy.requests_for("eth_call")), len(proxy.requests_for("eth_getCode"))
        assert calls[0] > 0
        await keeper.recover()
        assert keeper.dialects is book and keeper.ready
        after = len(proxy.requests_for("eth_call")), len(proxy.requests_for("eth_getCode"))
        assert after == calls
        fresh = make_keeper(1, client=client)
        await fresh.recover()
        assert fresh.dialects is not None and fresh.dialects.detections == book.detections
        assert len(proxy.requests_for("eth_call")) > after[0]


async def test_with_nothing_due_a_fee_spike_is_no_cap_hit(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """Fees above the cap while nothing is due hold nothing: no cap hit in the summary or
    in keeper_fee_cap_hits_total (the FeeCapHit alert), no fee history asked for."""
    registry = CollectorRegistry()
    async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url) as client:
        keeper = make_keeper(client=client, max_fee_cap=20 * 10**9, metrics=Metrics(registry))
        escrows.control.set_base_fee(50 * 10**9)
        escrows.control.mine()
        for _ in range(2):
            summary = await keeper.tick(await head(rpc), [], [])
            assert not summary.fee_cap and summary.sent == 0
            escrows.control.mine()
        assert proxy.requests_for("eth_feeHistory") == []
    assert registry.get_sample_value("keeper_fee_cap_hits_total") == 0


async def test_adopting_a_stopped_keepers_intents_is_counted(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """A keeper that stopped renewing its claim leaves a sent refund in flight; the one that
    adopts it counts it in keeper_intents_adopted_total and settles it."""
    ids = escrows.expired_jobs(1)
    db = tmp_path / "shared.db"
    registry = CollectorRegistry()
    stopped = make_keeper(0, db=db, claim_seconds=1.0)
    escrows.control.set_automine(False)
    try:
        await run(stopped, escrows, rpc, ids)  # sent, pending; never ticked again
        await asyncio.sleep(1.2)
        adopter = make_keeper(1, db=db, claim_seconds=30.0, metrics=Metrics(registry))
        await run(adopter, escrows, rpc, ids)
    finally:
        escrows.control.set_automine(True)
    assert registry.get_sample_value("keeper_intents_adopted_total") == 1
    [intent] = keeper_books.all_intents(adopter.store)
    assert intent.claimed_by == address_of(KEEPER_KEYS[1])
    escrows.control.mine()
    await run(adopter, escrows, rpc, ids, ticks=2)
    [intent] = keeper_books.all_intents(adopter.store)
    assert (intent.status, intent.outcome) == ("done", "confirmed")
    assert nonce_of(escrows, KEEPER_KEYS[1]) == 0  # the adopter signed nothing


@pytest.mark.parametrize("source", ["env", "keystore"])
async def test_a_dry_run_with_a_configured_key_uses_its_signer(
    rpc: RpcClient, tmp_path: Path, source: str
) -> None:
    """dry_run goes without a signer only when no key is configured: with a key variable or
    a keystore (and its passphrase file) the keeper plans as that address."""
    key = KEEPER_KEYS[2]
    if source == "env":
        cfg = KeeperConfig(enabled=True, dry_run=True, private_key_env="KP")
    else:
        store, pw = tmp_path / "ks.json", tmp_path / "pw"
        encrypted = Account.encrypt(HexStr(key), "correct horse", kdf="scrypt", iterations=2)
        store.write_text(json.dumps(encrypted))
        pw.write_text("correct horse\n")
        cfg = KeeperConfig(
            enabled=True, dry_run=True, keystore=str(store), keystore_password_file=str(pw)
        )
    keeper = Keeper.from_config(
        cfg, chain_id=31337, rpc=rpc, db=open_db(tmp_path / "k.db"), environ={"KP": key}
    )
    assert keeper.signer is not None and keeper.address == address_of(key)


async def test_each_transaction_is_estimated_once(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """The gas estimates started alongside the sends are the ones the sends use: one
    eth_estimateGas per transaction, none asked twice."""
    ids = escrows.expired_jobs(2)
    async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url) as client:
        keeper = make_keeper(client=client, batch_size=1)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 2
        assert len(proxy.requests_for("eth_estimateGas")) == 2


async def test_recover_settles_what_was_in_flight_before_any_tick(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """A restart on the database of a keeper that sent a refund: recover() alone, before
    the first tick, finds it mined and confirms it, and resumes past its nonce."""
    ids = escrows.expired_jobs(1)
    db = tmp_path / "restart.db"
    await run(make_keeper(db=db), escrows, rpc, ids)  # sent (and mined), then stopped
    escrows.control.mine()
    restarted = make_keeper(db=db)
    [intent] = keeper_books.all_intents(restarted.store)
    assert intent.status == "inflight"
    await restarted.recover()
    [intent] = keeper_books.all_intents(restarted.store)
    assert (intent.status, intent.outcome) == ("done", "confirmed")
    assert restarted.tx.next_nonce == 1


async def test_a_keeper_renews_its_claim_on_what_it_has_in_flight(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """A refund in flight longer than the claim lasts stays the sending keeper's while it
    ticks: each tick renews the claim, so a second keeper on the database, ticking after
    the first claim would have run out, adopts nothing and sends nothing."""
    ids = escrows.expired_jobs(1)
    db = tmp_path / "shared.db"
    registry = CollectorRegistry()
    sender = make_keeper(0, db=db, claim_seconds=5.0)
    other = make_keeper(1, db=db, claim_seconds=30.0, metrics=Metrics(registry))
    escrows.control.set_automine(False)
    try:
        await run(sender, escrows, rpc, ids)  # sent, pending
        await other.recover()  # started, not yet ticking
        await asyncio.sleep(3.0)
        await run(sender, escrows, rpc, ids)  # still pending: the claim is renewed
        # past the first claim's five seconds, and 2 s (less the renewing tick's time after
        # its renewal: a slow machine's margin) before the renewed one's end
        await asyncio.sleep(3.0)
        summary = await other.tick(await head(rpc), escrows.jobs(ids), [])
    finally:
        escrows.control.set_automine(True)
    assert (summary.planned, summary.sent) == (0, 0)
    assert registry.get_sample_value("keeper_intents_adopted_total") == 0
    [intent] = keeper_books.all_intents(other.store)
    assert (intent.status, intent.claimed_by) == ("inflight", address_of(KEEPER_KEYS[0]))
    escrows.control.mine()
    await run(sender, escrows, rpc, ids, ticks=2)
    [intent] = keeper_books.all_intents(sender.store)
    assert (intent.status, intent.outcome) == ("done", "confirmed")
    assert nonce_of(escrows, KEEPER_KEYS[1], "pending") == 0


async def test_an_intent_another_keeper_holds_is_not_acted_on(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """Two keepers on one database: the first has just decided one refund (its intent
    written and claimed, the simulation under way) when the second ticks over both due
    jobs. The second simulates and sends only the other refund; the first one's intent
    stays open and its claim, and that job is not refunded by the second keeper."""
    ids = escrows.expired_jobs(2)
    held, free = escrows.jobs(ids)
    db = tmp_path / "shared.db"
    first = make_keeper(0, db=db)
    at = await head(rpc)
    refund = Action(held.contract, held.job_id, ActionKind.CLAIM_REFUND, held.expired_at, E)
    first.store.open_decisions([refund], at.number, at.hash)
    second = make_keeper(1, db=db)
    summary = await second.tick(await head(rpc), escrows.jobs(ids), [])
    assert summary.sent == 1
    assert {r.action.subject for r in summary.simulated} == {free.job_id}
    by_subject = {i.subject: i for i in keeper_books.all_intents(second.store)}
    mine = by_subject[held.job_id]
    assert (mine.status, mine.claimed_by) == ("open", address_of(KEEPER_KEYS[0]))
    assert by_subject[free.job_id].claimed_by == address_of(KEEPER_KEYS[1])
    [attempt] = keeper_books.all_attempts(second.store)
    assert second.store.attempt_intent_ids(attempt.id) == [by_subject[free.job_id].id]
    escrows.control.mine()
    states = {j.job_id: j.status for j in escrows.jobs(ids)}
    assert states == {held.job_id: JobStatus.FUNDED, free.job_id: JobStatus.EXPIRED}
    assert nonce_of(escrows, KEEPER_KEYS[0]) == 0


async def test_after_a_restart_the_books_nonces_stand_above_a_forgetful_nodes_count(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """A refund signed at nonce 0 that the node keeps forgetting (dropped from its pool
    before and again after the restarted keeper's recovery resent it): the chain counts
    no transaction of the signer, but the books say nonce 0 is spent. The restarted
    keeper resends those bytes at nonce 0 and signs the next refund at nonce 1, so
    both go out and are mined together; a new refund at nonce 0 would have displaced
    the first."""
    first, second = escrows.expired_jobs(2)
    db = tmp_path / "restart.db"
    escrows.control.set_automine(False)
    try:
        stopped = make_keeper(db=db)
        await run(stopped, escrows, rpc, [first])  # sent at nonce 0, then stopped
        [sent] = keeper_books.all_attempts(stopped.store)
        escrows.control.drop_transaction(sent.tx_hash)
        restarted = make_keeper(db=db)
        await restarted.recover()
        assert escrows.control.call("eth_getTransactionByHash", sent.tx_hash) is not None
        escrows.control.drop_transaction(sent.tx_hash)  # forgotten again
        assert nonce_of(escrows, KEEPER_KEYS[0], "pending") == 0
        summary = await restarted.tick(await head(rpc), escrows.jobs([first, second]), [])
        assert summary.sent == 1
        escrows.control.mine()
    finally:
        escrows.control.set_automine(True)
    refunded = [j.status for j in escrows.jobs([first, second])]
    assert refunded == [JobStatus.EXPIRED, JobStatus.EXPIRED]  # both in that one block
    await run(restarted, escrows, rpc, [first, second], ticks=2)
    attempts = keeper_books.all_attempts(restarted.store)
    assert sorted((a.nonce, a.status) for a in attempts) == [(0, "confirmed"), (1, "confirmed")]
    assert attempts[0].tx_hash == sent.tx_hash
    assert nonce_of(escrows, KEEPER_KEYS[0]) == 2


async def test_a_send_that_fails_leaves_no_gas_estimate_behind(
    escrows: Escrows, make_keeper: MakeKeeper
) -> None:
    """The node fails every gas estimate, slowly (an endpoint in trouble): the tick ends on
    the first send's failure, and the estimates started alongside that send end with it,
    those under way and those still queued (at most CALLS_AT_ONCE run at a time). Nothing
    of the failed tick is left running, to reach the node in the endpoint's backoff or
    during the next tick, and nothing was sent."""
    refunds = 2 * CALLS_AT_ONCE + 2
    ids = escrows.expired_jobs(refunds)
    async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as client:
        keeper = make_keeper(client=client, batch_size=1)
        await keeper.recover()
        proxy.rules.on(
            "eth_estimateGas",
            timeout=10**6,
            delay=0.3,
            error=10**6,
            error_code=-32603,
            error_message="internal error",
        )
        before = asyncio.all_tasks()
        with pytest.raises(RpcError, match="internal error"):
            await keeper.tick(await head(client), escrows.jobs(ids), [])
        still_running = [t.get_name() for t in asyncio.all_tasks() - before if not t.done()]
        assert still_running == []
        assert proxy.requests_for("eth_sendRawTransaction") == []
    assert nonce_of(escrows, KEEPER_KEYS[0], "pending") == 0


async def test_a_contract_whose_detection_fails_after_an_upgrade_gets_no_transaction(
    escrows: Escrows, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """An escrow behind a proxy with a refund due is upgraded (to the same implementation:
    the refund its old dialect encodes would still pass), and the node then fails every
    call to it, so its dialect cannot be detected again: the keeper decides nothing
    there, however long the node fails, and sends the refund once it can detect it."""
    d, control = escrows.d, escrows.control
    w3 = Web3(Web3.HTTPProvider(escrows.url))
    escrow = deploy_contract(w3, DEPLOYER, "UpgradeableProxy", Web3.to_checksum_address(d.commerce))
    contracts = [ContractConfig("up", E, escrow, 0, "")]
    db = tmp_path / "held.db"
    index = indexer(db, escrows, contracts)
    async with RpcProxy(escrows.url) as node, make_rpc(node.url, attempts=1) as client:
        keeper = make_keeper(db=db, client=client, contracts=contracts)
        try:
            await keeper.detect_dialects()
            ids = escrows.expired_jobs(1, escrow=escrow)
            escrows.call(DEPLOYER, escrow, "upgradeTo(address)", d.commerce)
            await index.to_head()
            node.rules.on("eth_call", to=escrow, error=10**6, error_code=-32603,
                          error_message="internal error")  # fmt: skip
            for _ in range(2):
                summary = await keeper.tick(
                    await head(client), escrows.jobs(ids, escrow=escrow), []
                )
                assert (summary.planned, summary.simulated, summary.sent) == (0, [], 0)
                control.mine()
            assert keeper_books.all_intents(keeper.store) == []
            assert node.requests_for("eth_sendRawTransaction") == []
            node.rules.clear()
            summary = await keeper.tick(await head(client), escrows.jobs(ids, escrow=escrow), [])
            assert summary.sent == 1
        finally:
            await index.rpc.close()
            index.conn.close()
    [job] = escrows.jobs(ids, escrow=escrow)
    assert job.status is JobStatus.EXPIRED
