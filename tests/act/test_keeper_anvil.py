"""The keeper against a real anvil: boundaries, races, permission, fees, batching."""

from __future__ import annotations

from typing import Any

import pytest
from keeper_harness import (
    CLIENT,
    KEEPER_KEYS,
    WORKER,
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
from taskmarket_harness import Diamond

from keeper.act import Keeper
from keeper.act.calls import classify_revert
from keeper.devnet.anvil import RpcError
from keeper.domain.model import JobStatus, Protocol, TaskState, TaskStatus
from keeper.domain.planner import PlannerConfig
from keeper.domain.sharding import shard_of
from keeper.errors import RetryableError
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient


def ready(keeper: Keeper) -> bool:
    return keeper.ready


class TestBoundary:
    """claimRefund fires on the first block at expiredAt and not one block earlier."""

    async def test_fires_at_expiry_not_before(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """At expiredAt - 1 nothing is sent; at expiredAt the refund is sent and confirmed."""
        expiry = escrows.now() + 1000
        ids = escrows.funded_jobs(1, expiry)
        keeper = make_keeper()
        escrows.control.mine_at(expiry - 1)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 0 and summary.planned == 0
        assert keeper_books.all_intents(keeper.store) == []
        escrows.control.mine_at(expiry)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 1
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
        await run(keeper, escrows, rpc, ids, ticks=2)
        [intent] = keeper_books.all_intents(keeper.store)
        assert (intent.status, intent.outcome) == ("done", "confirmed")
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 1

    async def test_submitted_job_waits_for_the_grace_period(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """A job submitted 10 min before expiry is refunded at submittedAt + 1 h, not before."""
        expiry = escrows.now() + 1000
        ids = escrows.funded_jobs(1, expiry)
        escrows.control.set_next_timestamp(expiry - 600)
        submitted = escrows.submit(ids[0])
        due = submitted + 3600
        keeper = make_keeper()
        escrows.control.mine_at(due - 1)
        assert (await keeper.tick(await head(rpc), escrows.jobs(ids), [])).sent == 0
        escrows.control.mine_at(due)
        assert (await keeper.tick(await head(rpc), escrows.jobs(ids), [])).sent == 1
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED


class TestCompetingKeepers:
    """Several keepers with different keys execute each action exactly once."""

    async def test_three_keepers_one_execution(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """The first keeper refunds; the others record preempted and broadcast nothing."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(3, expiry)
        keepers = [make_keeper(i) for i in range(3)]
        escrows.control.mine_at(expiry)
        decision_head, seen = await head(rpc), escrows.jobs(ids)
        for keeper in keepers:  # all decide on the same head and the same projections
            await keeper.tick(decision_head, seen, [])
        assert [nonce_of(escrows, k) for k in KEEPER_KEYS] == [1, 0, 0]
        for keeper in keepers[1:]:
            outcomes = {(i.subject, i.outcome) for i in keeper_books.all_intents(keeper.store)}
            assert outcomes == {(s, "preempted") for s in ids}
            assert keeper_books.all_attempts(keeper.store) == []
        escrows.control.mine()
        for keeper in keepers:
            await run(keeper, escrows, rpc, ids)
        assert {i.outcome for i in keeper_books.all_intents(keepers[0].store)} == {"confirmed"}
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))
        assert [nonce_of(escrows, k) for k in KEEPER_KEYS] == [1, 0, 0]

    async def test_same_block_race_broadcasts_nothing_that_reverts(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Two keepers whose transactions meet in one block: both succeed, one does the work."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(1, expiry)
        first, second = make_keeper(0), make_keeper(1)
        escrows.control.mine_at(expiry)
        decision_head, seen = await head(rpc), escrows.jobs(ids)
        escrows.control.set_automine(False)
        try:  # both pass the gate: neither sees the other's pooled transaction
            assert (await first.tick(decision_head, seen, [])).sent == 1
            assert (await second.tick(decision_head, seen, [])).sent == 1
            escrows.control.mine()
        finally:
            escrows.control.set_automine(True)
        escrows.control.mine()
        for keeper in (first, second):
            await run(keeper, escrows, rpc, ids)
        receipts = [
            escrows.control.call("eth_getTransactionReceipt", a.tx_hash)
            for k in (first, second)
            for a in keeper_books.all_attempts(k.store)
        ]
        assert [r["status"] for r in receipts] == ["0x1", "0x1"]
        outcomes = sorted(
            str(keeper_books.all_intents(k.store)[0].outcome) for k in (first, second)
        )
        assert outcomes == ["confirmed", "preempted"]


class TestBatching:
    """Many due actions go out as a few Multicall3 transactions."""

    async def test_hundred_jobs_in_two_batches(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """100 jobs expiring in one block are refunded by two aggregate3 transactions."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(100, expiry)
        keeper = make_keeper(batch_size=50)
        escrows.control.mine_at(expiry)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 2
        await run(keeper, escrows, rpc, ids, ticks=2)
        intents = keeper_books.all_intents(keeper.store)
        assert len(intents) == 100 and {i.outcome for i in intents} == {"confirmed"}
        assert len({i.tx_hash for i in intents}) == 2
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 2

    async def test_missing_multicall_falls_back_to_single_calls(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """A Multicall3 address without code is detected in simulation; calls go out alone."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(3, expiry)
        keeper = make_keeper(multicall=escrows.d.treasury)  # an account, not a contract
        escrows.control.mine_at(expiry)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 3 and keeper.tx.multicall is None
        assert {a.kind for a in keeper_books.all_attempts(keeper.store)} == {"call"}
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))

    async def test_a_foreign_answer_from_a_multicall_with_code_keeps_batching(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Multicall3 is there, the node answers its aggregate3 with data that is not its
        results: the tick fails as on a bad answer, batching stays on (it went off for
        good, every later refund alone at several times the gas), and the next tick
        sends the three refunds in one batch."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(3, expiry)
        escrows.control.mine_at(expiry)
        multicall = escrows.d.multicall
        async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as client:
            keeper = make_keeper(client=client, multicall=multicall)
            proxy.rules.on("eth_call", patched=1, patch="0x" + "ab" * 40, to=multicall)
            with pytest.raises(RetryableError, match="not its results"):
                await keeper.tick(await head(rpc), escrows.jobs(ids), [])
            assert proxy.count("patched", "eth_call") == 1
            assert keeper.tx.multicall == multicall.lower()
            summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 1
        assert [a.kind for a in keeper_books.all_attempts(keeper.store)] == ["batch"]
        assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))

    async def test_a_call_failing_between_gate_and_estimate_is_dropped_from_the_batch(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Another party refunds job 1 in a block mined just after the gate's simulation at
        latest: the batch's gas estimate (no allowFailure) reverts, the calls are simulated
        again, job 1 ends preempted and the other two go out in this tick's one batch."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(3, expiry)
        escrows.control.mine_at(expiry)
        raced: list[str] = []
        first = int(ids[0])

        def race(params: list[Any], result: Any) -> Any:
            """The gate's last simulation is answered; then the rival's block is mined."""
            if params[1] == "latest" and not raced:
                refund = "claimRefund(uint256)"
                raced.append(escrows.call(CLIENT, escrows.d.commerce, refund, first))
            return result

        async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as client:
            keeper = make_keeper(client=client)
            proxy.rules.on("eth_call", patched=10, patch=race, to=escrows.d.multicall)
            summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
            assert raced and summary.sent == 1
            [attempt] = keeper_books.all_attempts(keeper.store)
            assert attempt.kind == "batch"
            assert len(keeper.store.attempt_intent_ids(attempt.id)) == 2
            await run(keeper, escrows, rpc, ids, ticks=2)
        intents = {i.subject: i for i in keeper_books.all_intents(keeper.store)}
        outcomes = {subject: i.outcome for subject, i in intents.items()}
        assert outcomes == {ids[0]: "preempted", ids[1]: "confirmed", ids[2]: "confirmed"}
        assert intents[ids[0]].detail == "WrongStatus()"  # the second simulation's word

    async def test_subject_failing_inside_batch_is_preempted(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """A subject another party settles between simulation and inclusion ends preempted."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(3, expiry)
        keeper = make_keeper()
        escrows.control.mine_at(expiry)
        decision_head = await head(rpc)
        jobs = escrows.jobs(ids)
        # the gate passes for all three at the decision block...
        escrows.control.set_automine(False)
        try:
            rival = make_keeper(1, batch_size=1)
            await rival.tick(decision_head, jobs[:1], [])
            await keeper.tick(decision_head, jobs, [])
        finally:
            escrows.control.set_automine(True)
        escrows.control.mine()
        await run(keeper, escrows, rpc, ids, ticks=2)
        outcomes = {i.subject: i.outcome for i in keeper_books.all_intents(keeper.store)}
        assert outcomes == {ids[0]: "preempted", ids[1]: "confirmed", ids[2]: "confirmed"}
        # ended by the batch's receipt itself, not later by the planner finding it not due
        [lost] = [i for i in keeper_books.all_intents(keeper.store) if i.subject == ids[0]]
        assert lost.detail == "call failed inside the batch"


class TestPermission:
    """A requester-only evaluatorTimeout ends not_permitted once, never a retry loop."""

    async def test_not_permitted_once_then_refund_after_expiry(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """On the diamond evaluatorTimeout answers NotTrustedForwarder once, with zero
        broadcasts; past expiry the task is refunded with refundExpired(bytes32,uint256)."""
        dm = Diamond(escrows)
        task_id, deadline = dm.review_task(50, window=300)
        keeper = make_keeper()
        escrows.control.mine_at(deadline + 1)
        summary = await keeper.tick(await head(rpc), [], [dm.task(task_id, deadline)])
        [intent] = keeper_books.all_intents(keeper.store)
        assert (intent.action, intent.outcome) == ("evaluatorTimeout", "not_permitted")
        assert intent.detail == "NotTrustedForwarder()" and summary.sent == 0
        assert keeper_books.all_attempts(keeper.store) == []  # nothing was ever signed for it
        for _ in range(keeper.settings.redecide_after_blocks + 2):
            escrows.control.mine()
            await keeper.tick(await head(rpc), [], [dm.task(task_id, deadline)])
        timeout_intents = [
            i for i in keeper_books.all_intents(keeper.store) if i.action == "evaluatorTimeout"
        ]
        assert timeout_intents == [intent]  # untouched: same decision, same row
        refunds = [i for i in keeper_books.all_intents(keeper.store) if i.action == "refundExpired"]
        assert [(i.outcome) for i in refunds] == ["confirmed"]
        assert dm.task(task_id).status.name == "EXPIRED"
        [attempt] = keeper_books.all_attempts(keeper.store)
        tx = escrows.control.call("eth_getTransactionByHash", attempt.tx_hash)
        assert "3e91a36b" + task_id[2:] + "00" * 32 in tx["input"]

    async def test_permissionless_timeout_is_sent(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Where anyone may call evaluatorTimeout (pre-7 contract), it fires one second past
        the deadline."""
        tm = escrows.d.taskmarket_legacy
        task_id = "0x" + "cd" * 32
        deadline = escrows.review_task(tm, task_id, escrows.now() + 5000, window=300)
        keeper = make_keeper()
        escrows.control.mine_at(deadline)
        assert (
            await keeper.tick(await head(rpc), [], [escrows.task(tm, task_id, deadline)])
        ).sent == 0
        escrows.control.mine_at(deadline + 1)
        assert (
            await keeper.tick(await head(rpc), [], [escrows.task(tm, task_id, deadline)])
        ).sent == 1
        assert escrows.task(tm, task_id, deadline).status.name == "PENDING_APPROVAL"


class TestFees:
    """Nothing is sent above the fee cap; the work completes when fees fall."""

    async def test_base_fee_spike_waits_then_completes(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Above the cap: fee_cap recorded, no transaction; below it again: confirmed."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(1, expiry)
        registry = CollectorRegistry()
        keeper = make_keeper(max_fee_cap=20 * 10**9, metrics=Metrics(registry))
        escrows.control.set_base_fee(50 * 10**9)
        escrows.control.mine_at(expiry)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.fee_cap and summary.sent == 0
        assert registry.get_sample_value("keeper_fee_cap_hits_total") == 1  # the FeeCapHit alert
        [intent] = keeper_books.all_intents(keeper.store)
        assert (intent.status, intent.outcome) == ("open", "fee_cap")
        assert keeper_books.all_attempts(keeper.store) == []
        escrows.control.set_base_fee(10**9)
        escrows.control.mine()
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 1
        [attempt] = keeper_books.all_attempts(keeper.store)
        assert attempt.max_fee <= 20 * 10**9
        await run(keeper, escrows, rpc, ids, ticks=2)
        assert keeper_books.all_intents(keeper.store)[0].outcome == "confirmed"


class TestPendingGauge:
    """keeper_pending_txs feeds the PendingTransactionsStuck alert: it must move."""

    async def test_pending_gauge_counts_a_sent_transaction_until_final(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """A refund waiting for a block is one pending transaction; once final, none."""
        ids = escrows.expired_jobs(1)
        registry = CollectorRegistry()
        keeper = make_keeper(metrics=Metrics(registry))
        escrows.control.set_automine(False)
        try:
            assert (await keeper.tick(await head(rpc), escrows.jobs(ids), [])).sent == 1
            assert (await keeper.tick(await head(rpc), escrows.jobs(ids), [])).sent == 0
            assert registry.get_sample_value("keeper_pending_txs") == 1
        finally:
            escrows.control.set_automine(True)
        escrows.control.mine()
        await run(keeper, escrows, rpc, ids, ticks=2)
        [intent] = keeper_books.all_intents(keeper.store)
        assert intent.outcome == "confirmed" and intent.receipt_block is not None
        assert registry.get_sample_value("keeper_pending_txs") == 0
        # the delay is chain time from the deadline to the confirming block
        block = escrows.control.call("eth_getBlockByNumber", hex(intent.receipt_block), False)
        delay = registry.get_sample_value(
            "keeper_action_delay_seconds_sum", {"action": "claimRefund"}
        )
        assert delay == int(block["timestamp"], 16) - intent.due_at


class TestModes:
    """dry_run sends nothing; a signer below the minimum balance stops sending."""

    async def test_dry_run_simulates_only(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """dry_run reports the simulation verdicts and leaves the chain and database alone."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(2, expiry)
        keeper = make_keeper(dry_run=True)
        escrows.control.mine_at(expiry)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert [r.verdict for r in summary.simulated] == ["ok", "ok"]
        assert summary.sent == 0 and keeper_books.all_intents(keeper.store) == []
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 0

    async def test_low_balance_stops_sending(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Below min_balance_wei nothing is sent and readiness turns false until refunded."""
        expiry = escrows.now() + 100
        ids = escrows.funded_jobs(1, expiry)
        keeper = make_keeper(min_balance_wei=10**18)
        escrows.control.set_balance(address_of(KEEPER_KEYS[0]), 10**17)
        escrows.control.mine_at(expiry)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert not summary.balance_ok and not ready(keeper) and summary.sent == 0
        escrows.control.set_balance(address_of(KEEPER_KEYS[0]), 10**19)
        escrows.control.mine()
        again = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert ready(keeper) and again.balance_ok and again.sent == 1


@pytest.mark.slow
async def test_thousand_jobs_expiring_in_one_block(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """1,000 jobs expiring in the same block are all refunded by ten batches in one block."""
    expiry = escrows.now() + 100
    ids = escrows.funded_jobs(1000, expiry)
    keeper = make_keeper(batch_size=100)
    escrows.control.mine_at(expiry)
    start = escrows.control.block_number()
    escrows.control.set_automine(False)
    try:
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        escrows.control.mine()
    finally:
        escrows.control.set_automine(True)
    assert summary.sent == 10
    await run(keeper, escrows, rpc, ids, ticks=2)
    intents = keeper_books.all_intents(keeper.store)
    assert len(intents) == 1000 and {i.outcome for i in intents} == {"confirmed"}
    assert {i.receipt_block for i in intents} == {start + 1}
    assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))


class TestTaskBoundaries:
    """finalizeVerdict at the appeal deadline, refundExpired one second past expiry."""

    async def test_finalize_at_appeal_deadline_not_before(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """At deadline - 1 nothing; at the deadline finalizeVerdict pays the award (Accepted)."""
        dm = Diamond(escrows)
        task_id, deadline = dm.appealing_task()
        keeper = make_keeper()
        escrows.control.mine_at(deadline - 1)
        state = dm.task(task_id, appeal_deadline=deadline)
        assert (await keeper.tick(await head(rpc), [], [state])).sent == 0
        escrows.control.mine_at(deadline)
        state = dm.task(task_id, appeal_deadline=deadline)
        assert state.expiry_time >= deadline  # evaluate raised the expiry to the deadline
        assert (await keeper.tick(await head(rpc), [], [state])).sent == 1
        assert dm.task(task_id).status.name == "ACCEPTED"
        assert [i.action for i in keeper_books.all_intents(keeper.store)] == ["finalizeVerdict"]

    @pytest.mark.parametrize("market", ["diamond", "legacy"])
    async def test_refund_one_second_after_expiry(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, market: str
    ) -> None:
        """At expiryTime nothing (the contract needs now > expiry); one second later, refunded,
        in each contract's own dialect."""
        if market == "diamond":
            dm = Diamond(escrows)
            task_id = dm.create(500)
            read = dm.task
        else:
            tm, task_id = escrows.d.taskmarket_legacy, "0x" + "e2" * 32
            escrows.open_task(tm, task_id, escrows.now() + 500)

            def read(t: str) -> TaskState:
                return escrows.task(tm, t)

        expiry = read(task_id).expiry_time
        keeper = make_keeper()
        escrows.control.mine_at(expiry)
        assert (await keeper.tick(await head(rpc), [], [read(task_id)])).sent == 0
        escrows.control.mine_at(expiry + 1)
        assert (await keeper.tick(await head(rpc), [], [read(task_id)])).sent == 1
        assert read(task_id).status.name == "EXPIRED"


class TestTaskHazards:
    """Tasks the keeper must leave alone past expiry on the diamond."""

    async def test_disputed_past_expiry_is_left_alone(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """Appealed (Disputed) and past expiry: reported, no intent, nothing sent."""
        dm = Diamond(escrows)
        task_id, deadline = dm.appealing_task()
        dm.relay(WORKER, "appeal(bytes32)", bytes.fromhex(task_id[2:]))
        keeper = make_keeper()
        state = dm.task(task_id, appeal_deadline=deadline)
        escrows.control.mine_at(state.expiry_time + 3600)
        for _ in range(2):
            summary = await keeper.tick(await head(rpc), [], [dm.task(task_id, None, deadline)])
            assert [r.kind.value for r in summary.reports] == ["disputed_past_expiry"]
            escrows.control.mine()
        assert (
            keeper_books.all_intents(keeper.store) == []
            and keeper_books.all_attempts(keeper.store) == []
        )
        assert dm.task(task_id).status is TaskStatus.DISPUTED

    async def test_appealing_past_expiry_is_finalized_not_refunded(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """An Appealing task past its expiry gets finalizeVerdict, never refundExpired."""
        dm = Diamond(escrows)
        task_id, deadline = dm.appealing_task()
        keeper = make_keeper()
        escrows.control.mine_at(dm.task(task_id).expiry_time + 100)
        await keeper.tick(await head(rpc), [], [dm.task(task_id, None, deadline)])
        assert [i.action for i in keeper_books.all_intents(keeper.store)] == ["finalizeVerdict"]
        assert dm.task(task_id).status is TaskStatus.ACCEPTED

    async def test_bounty_with_submissions_is_not_refunded(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """A Bounty with an active submission past expiry is reported; the chain agrees."""
        dm = Diamond(escrows)
        task_id = dm.bounty_with_submission(200)
        state = dm.task(task_id)
        state.extra["active_submissions"] = "1"  # what the indexer counts from TaskSubmitted
        keeper = make_keeper()
        escrows.control.mine_at(state.expiry_time + 10)
        summary = await keeper.tick(await head(rpc), [], [state])
        assert [r.kind.value for r in summary.reports] == ["submissions_pending_past_expiry"]
        assert keeper_books.all_intents(keeper.store) == []
        refund = calldata("refundExpired(bytes32,uint256)", bytes.fromhex(task_id[2:]), 0)
        with pytest.raises(RpcError) as err:
            escrows.view(dm.address, refund)
        data = bytes.fromhex(str(err.value.error["data"])[2:])
        assert classify_revert(data, Protocol.TASKMARKET) == ("preempted", "SubmissionsExist()")
        assert dm.task(task_id).status is TaskStatus.OPEN


async def test_open_job_with_budget_is_reported_not_refunded(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """An expired, unfunded job with a budget is reported (logged once); never refunded."""
    expiry = escrows.now() + 100
    job_id = escrows.open_job_with_budget(expiry, 5 * 10**6)
    keeper = make_keeper()
    escrows.control.mine_at(expiry + 3600)
    with capture_logs() as logs:
        for _ in range(2):
            summary = await keeper.tick(await head(rpc), escrows.jobs([job_id]), [])
            assert [(r.subject, r.kind.value) for r in summary.reports] == [
                (job_id, "open_job_with_budget_expired")
            ]
            escrows.control.mine()
    assert [e["event"] for e in logs].count("keeper_report") == 1
    assert (
        keeper_books.all_intents(keeper.store) == []
        and keeper_books.all_attempts(keeper.store) == []
    )
    assert escrows.jobs([job_id])[0].status is JobStatus.OPEN


async def test_sharded_keepers_with_one_dead(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """With two shards and shard 1 dead, shard 0 takes the other half after the fallback."""
    expiry = escrows.now() + 100
    ids = escrows.funded_jobs(6, expiry)
    alive = make_keeper(planner=PlannerConfig(shard=0, shards=2, shard_fallback_seconds=300))
    mine = {s for s in ids if shard_of(s, 2) == 0}
    assert mine and mine != set(ids)  # the six ids fall on both shards
    escrows.control.mine_at(expiry)
    await keeper_round(alive, escrows, rpc, ids)
    expired = {j.job_id for j in escrows.jobs(ids) if j.status is JobStatus.EXPIRED}
    assert expired == mine
    escrows.control.mine_at(expiry + 299)
    await keeper_round(alive, escrows, rpc, ids)
    assert {j.job_id for j in escrows.jobs(ids) if j.status is JobStatus.EXPIRED} == mine
    escrows.control.mine_at(expiry + 300)
    await keeper_round(alive, escrows, rpc, ids)
    assert all(j.status is JobStatus.EXPIRED for j in escrows.jobs(ids))


async def keeper_round(keeper: Keeper, escrows: Escrows, rpc: RpcClient, ids: list[str]) -> None:
    await run(keeper, escrows, rpc, ids)
