"""Indexer, store and keeper together on the task market diamond and the pre-7 contract:
what the keeper decides comes from the indexed rows, exactly as in the daemon."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import eth_abi
import pytest
from eth_utils import keccak
from keeper_harness import (
    CLIENT,
    DEPLOYER,
    EVALUATOR,
    RESOLVER,
    WORKER,
    Escrows,
    MakeKeeper,
    address_of,
    calldata,
    make_rpc,
)
from structlog.testing import capture_logs
from support import keeper_books
from support.devnet_daemon import devnet_daemon
from support.rpc_proxy import RpcProxy
from taskmarket_harness import REWARD, Diamond
from web3 import Web3

from keeper.act import Keeper, TickSummary
from keeper.compose import build_rpc
from keeper.config import ClusterConfig, Config, ContractConfig, load_config
from keeper.devnet import deploy
from keeper.domain.dialects import ErrorClass
from keeper.domain.dialects_taskmarket import TASKMARKET, TASKMARKET_MONOLITHIC, TASKMARKET_PRE7
from keeper.domain.model import BlockHeader, Protocol, TaskState, TaskStatus
from keeper.domain.planner import ActionKind
from keeper.domain.reads import RESOLVE_SILENT
from keeper.domain.taskmodes import BOUNTY, CLAIM
from keeper.errors import RetryableError
from keeper.indexing import build_indexing
from keeper.leadership import Leadership
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.rpc.errors import ExecutionRevertedError
from keeper.store.db import connect
from keeper.store.migrations import migrate
from keeper.store.states import due_tasks, task_from_row


def _config(tmp: Path, escrows: Escrows, extra: Sequence[ContractConfig] = ()) -> Config:
    d = escrows.d
    contracts = [(n, p, a) for n, p, a in d.escrows()]
    contracts += [(c.name, c.protocol, c.address) for c in extra]
    blocks = "".join(
        f'[[contracts]]\nname = "{n}"\nprotocol = "{p.value}"\naddress = "{a}"\n'
        f"start_block = {d.start_block}\n"
        for n, p, a in contracts
    )
    path = tmp / "e2e.toml"
    path.write_text(
        f'[chain]\nchain_id = 31337\nrpc_urls = ["{escrows.url}"]\nfinality = "confirmations"\n'
        f'confirmations = 0\n\n[database]\npath = "{tmp / "e2e.db"}"\n\n[api]\nenabled = false\n\n'
        + blocks
    )
    return load_config(path)


class Index:
    """The daemon's indexer over its own database (range scans to the head)."""

    def __init__(self, cfg: Config) -> None:
        self.conn = connect(cfg.database.path)
        migrate(self.conn)
        self.rpc = build_rpc(cfg, None)
        self.indexing = build_indexing(cfg, self.rpc, self.conn)
        self.indexer = self.indexing.indexer

    async def to_head(self) -> None:
        for _ in range(1000):
            try:
                await self.indexing.step()
            except RetryableError:
                await asyncio.sleep(0.05)
                continue
            head = self.indexer.state.head
            if head is not None and self.indexer.start_cursor() >= head.number:
                return
        raise AssertionError("indexer did not reach the head")

    def task(self, contract: str, task_id: str) -> TaskState:
        row = self.conn.execute(
            "SELECT * FROM tasks WHERE contract = ? AND task_id = ?", (contract, task_id)
        ).fetchone()
        assert row is not None, task_id
        return task_from_row(row)

    def due(self, head: BlockHeader) -> list[TaskState]:
        """The tasks the daemon hands its keeper at ``head``."""
        return due_tasks(self.conn, 31337, head.timestamp)


@pytest.fixture
async def index(escrows: Escrows, tmp_path: Path) -> AsyncIterator[Index]:
    idx = Index(_config(tmp_path, escrows))
    try:
        yield idx
    finally:
        await idx.rpc.close()
        idx.conn.close()


async def _tick(keeper_rpc: RpcClient, keeper: object, index: Index) -> int:
    await index.to_head()
    head = await keeper_rpc.get_block("latest")
    assert head is not None
    summary = await keeper.tick(head, [], index.due(head))  # type: ignore[attr-defined]
    return int(summary.sent)


def _counted(metrics: Metrics, name: str, **labels: str) -> float:
    """The sum of counter ``name``'s samples whose labels include ``labels``."""
    return sum(
        sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


async def _standby_tick(keeper_rpc: RpcClient, keeper: Keeper, index: Index) -> TickSummary:
    """A tick at the head on a daemon standing by: its index store fenced by a lease it
    never acquired (the caller lifts the fence to make it the leader)."""
    await index.to_head()
    index.indexing.store.fence = Leadership(index.conn, 31337, ClusterConfig()).fence
    head = await keeper_rpc.get_block("latest")
    assert head is not None
    return await keeper.tick(head, [], index.due(head))


async def test_created_then_expired_is_indexed_and_refunded(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """A task only created: indexed with requester, reward and expiry; one second past
    expiry refunded with refundExpired(bytes32,uint256); the index then shows it Expired."""
    dm = Diamond(escrows)
    task_id = dm.create(400)
    expiry = dm.task(task_id).expiry_time
    await index.to_head()
    row = index.task(dm.address, task_id)
    assert (row.requester, row.reward, row.expiry_time, row.status) == (
        address_of(CLIENT),
        REWARD,
        expiry,
        TaskStatus.OPEN,
    )
    keeper = make_keeper()
    escrows.control.mine_at(expiry)
    assert await _tick(rpc, keeper, index) == 0
    escrows.control.mine_at(expiry + 1)
    assert await _tick(rpc, keeper, index) == 1
    [attempt] = keeper_books.all_attempts(keeper.store)
    tx = escrows.control.call("eth_getTransactionByHash", attempt.tx_hash)
    assert "3e91a36b" + task_id[2:] + "00" * 32 in tx["input"]
    escrows.control.mine()
    await index.to_head()
    row = index.task(dm.address, task_id)
    assert (row.status, row.refunded_amount) == (TaskStatus.EXPIRED, REWARD)


async def test_task_updated_moves_the_keepers_deadline(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """After TaskUpdated the keeper waits for the new expiry, not the created one."""
    dm = Diamond(escrows)
    task_id = dm.create(300)
    old = dm.task(task_id).expiry_time
    dm.relay(CLIENT, "updateTask(bytes32,uint256,uint256,uint256,uint256)",
             bytes.fromhex(task_id[2:]), 0, old + 2000, 0, 0)  # fmt: skip
    keeper = make_keeper()
    escrows.control.mine_at(old + 1)
    assert await _tick(rpc, keeper, index) == 0
    assert index.task(dm.address, task_id).expiry_time == old + 2000
    assert keeper_books.all_intents(keeper.store) == []
    escrows.control.mine_at(old + 2001)
    assert await _tick(rpc, keeper, index) == 1
    assert dm.task(task_id).status is TaskStatus.EXPIRED


async def test_bounty_with_submissions_is_not_refunded(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """The index counts a Bounty's submissions; past expiry the keeper reports, sends none."""
    dm = Diamond(escrows)
    task_id = dm.bounty_with_submission(300)
    keeper = make_keeper()
    escrows.control.mine_at(dm.task(task_id).expiry_time + 10)
    assert await _tick(rpc, keeper, index) == 0
    row = index.task(dm.address, task_id)
    assert (row.mode, row.status, row.extra["active_submissions"]) == (BOUNTY, TaskStatus.OPEN, "1")
    assert keeper_books.all_intents(keeper.store) == []
    assert [r.kind.value for r in keeper.last.reports] == ["submissions_pending_past_expiry"]  # type: ignore[union-attr]


async def test_a_count_below_the_chains_costs_a_simulation_not_a_refund(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """Rejecting an address that never submitted frees nothing on chain (revision 13),
    while the index subtracts at least one (earlier revisions did): past expiry the keeper
    plans the refund, the simulation refuses it (SubmissionsExist) and nothing is sent;
    once the real worker is rejected too, the task is refunded."""
    dm = Diamond(escrows)
    task_id = dm.bounty_with_submission(300)
    reject = "rejectSubmission(bytes32,address)"
    dm.relay(CLIENT, reject, bytes.fromhex(task_id[2:]), address_of(DEPLOYER))
    keeper = make_keeper()
    escrows.control.mine_at(dm.task(task_id).expiry_time + 10)
    assert await _tick(rpc, keeper, index) == 0
    assert index.task(dm.address, task_id).extra["active_submissions"] == "0"
    assert keeper_books.outcome_counts(keeper.store) == {"preempted": 1}
    assert dm.task(task_id).status is TaskStatus.OPEN
    dm.relay(CLIENT, reject, bytes.fromhex(task_id[2:]), address_of(WORKER))
    sent = 0
    for _ in range(8):  # the preempted intent is looked at again a few blocks later
        escrows.control.mine()
        sent += await _tick(rpc, keeper, index)
    assert sent == 1
    escrows.control.mine()
    assert dm.task(task_id).status is TaskStatus.EXPIRED


CREATE_SINGLE = "createTask(uint256,uint256,bytes4,uint256,uint256,bytes32,string,bytes4)"


async def test_the_single_contract_before_the_diamond_is_refunded_once(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """The UUPS contract the diamond replaced answers refundExpired(bytes32) and no
    finalizeVerdict: detected as TaskMarketMonolithic, its expired task is refunded once
    (the contract would pay a second refundExpired again; the keeper never sends one).
    Its Error(string) refusals are classified: too early is not yet due, an accepted
    task's refund preempted."""
    d = escrows.d
    w3 = deploy.connect(escrows.url)
    usdc, treasury = (Web3.to_checksum_address(a) for a in (d.usdc, d.treasury))
    mono = deploy.deploy_contract(w3, DEPLOYER, "MonolithicTaskMarket", usdc, treasury, 500)
    escrows.call(DEPLOYER, mono, "addForwarder(address)", d.taskmarket_forwarder)
    ids = []
    for nonce in range(2):
        escrows.call(DEPLOYER, d.usdc, "mint(address,uint256)", mono, REWARD)
        create = calldata(CREATE_SINGLE, REWARD, 300, bytes.fromhex(CLAIM[2:]), 0, 0,
                          b"\0" * 32, "", b"\0" * 4)  # fmt: skip
        escrows.call(CLIENT, d.taskmarket_forwarder, "forward(address,bytes)", mono,
                     bytes.fromhex(create[2:]))  # fmt: skip
        ids.append(keccak(eth_abi.encode(["uint256", "address", "address", "uint256"],
                                         [31337, mono, address_of(CLIENT), nonce])))  # fmt: skip
    refunded, accepted = ("0x" + i.hex() for i in ids)
    for signature, key, *args in (
        ("claimTask(bytes32,uint256)", WORKER, ids[1], 0),
        ("submitWork(bytes32,bytes32)", WORKER, ids[1], b"\x21" * 32),
        ("acceptSubmission(bytes32,address)", CLIENT, ids[1], address_of(WORKER)),
    ):
        call = calldata(signature, *args)
        escrows.call(key, d.taskmarket_forwarder, "forward(address,bytes)", mono,
                     bytes.fromhex(call[2:]))  # fmt: skip
    config = ContractConfig("taskmarket_single", Protocol.TASKMARKET, mono, d.start_block)
    index = Index(_config(tmp_path, escrows, [config]))
    try:
        keeper = make_keeper(contracts=[config])
        await index.to_head()
        index_expiry = index.task(mono, refunded).expiry_time
        expiry = int.from_bytes(escrows.view(mono, calldata("taskState(bytes32)", ids[0]))[32:])
        assert index_expiry == expiry
        refund = TASKMARKET_MONOLITHIC.calls[ActionKind.REFUND_EXPIRED]

        async def refused(task_id: str) -> ErrorClass | None:
            with pytest.raises(ExecutionRevertedError) as reverted:
                await rpc.call(mono, refund.encode(task_id))
            known = TASKMARKET.classify(reverted.value.revert_data)
            return known[0] if known is not None else None

        assert await refused(refunded) is ErrorClass.NOT_YET_DUE  # "Task not expired"
        escrows.control.mine_at(expiry + 1)
        assert await refused(accepted) is ErrorClass.PREEMPTED  # "Task already accepted"
        sent = await _tick(rpc, keeper, index)
        assert keeper.dialects is not None
        assert keeper.dialects.detections[mono].dialect == "TaskMarketMonolithic"
        assert sent == 1
        for _ in range(8):  # confirmed, indexed, and never sent again
            escrows.control.mine()
            sent += await _tick(rpc, keeper, index)
        assert sent == 1
        assert index.task(mono, refunded).status is TaskStatus.EXPIRED
        [attempt] = keeper_books.all_attempts(keeper.store)
        tx = escrows.control.call("eth_getTransactionByHash", attempt.tx_hash)
        assert refund.encode(refunded).hex() in tx["input"]  # inside a Multicall3 batch
        assert index.task(mono, accepted).status is TaskStatus.ACCEPTED
        assert keeper_books.outcome_counts(keeper.store) == {"confirmed": 1}
    finally:
        await index.rpc.close()
        index.conn.close()


async def test_old_and_new_shapes_fill_the_same_tables(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """The same life (created, expired, refunded by the keeper) on the pre-7 contract
    (five-argument TaskCreated) and on the diamond (rev-14 shape) gives the same rows."""
    dm = Diamond(escrows)
    new_id = dm.create(300)
    legacy, old_id = escrows.d.taskmarket_legacy, "0x" + "0d" * 32
    escrows.open_task(legacy, old_id, dm.task(new_id).expiry_time)
    keeper = make_keeper()
    escrows.control.mine_at(dm.task(new_id).expiry_time + 1)
    assert await _tick(rpc, keeper, index) == 1  # one Multicall3 batch, two dialects
    escrows.control.mine()
    await index.to_head()
    rows = [index.task(dm.address, new_id), index.task(legacy, old_id)]
    same = [(r.requester, r.status, r.refunded_amount == r.reward, r.expiry_time) for r in rows]
    assert same[0] == same[1] == (address_of(CLIENT), TaskStatus.EXPIRED, True, rows[0].expiry_time)
    variants = {
        (str(v[0]), str(v[1]))
        for v in index.conn.execute(
            "SELECT contract, variant FROM events WHERE name = 'TaskCreated'"
        )
    }
    assert variants == {(dm.address, "current"), (legacy, "pre14")}


async def test_paused_diamond_gets_no_simulation_until_unpaused(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index, tmp_path: Path
) -> None:
    """The owner pauses the diamond: an expired task is neither planned nor simulated
    (refundExpired would revert EnforcedPause every few blocks), the gauge says so; once
    unpaused the task is refunded. The keeper reads the pause from the index it shares."""
    dm = Diamond(escrows)
    task_id = dm.create(400)
    expiry = dm.task(task_id).expiry_time
    dm.direct(DEPLOYER, "pause()")
    metrics = Metrics(contract_names={dm.address: "taskmarket"})
    keeper = make_keeper(db=tmp_path / "e2e.db", metrics=metrics)
    escrows.control.mine_at(expiry + 1)
    for _ in range(6):
        await index.to_head()
        head = await rpc.get_block("latest")
        assert head is not None
        summary = await keeper.tick(head, [], index.due(head))
        assert summary.simulated == [] and list(summary.paused) == [dm.address]
        escrows.control.mine()
    assert keeper_books.all_intents(keeper.store) == []
    paused = {"contract": "taskmarket"}
    assert metrics.registry.get_sample_value("keeper_contract_paused", paused) == 1.0
    dm.direct(DEPLOYER, "unpause()")
    assert await _tick(rpc, keeper, index) == 1
    escrows.control.mine()
    await index.to_head()
    assert index.task(dm.address, task_id).status is TaskStatus.EXPIRED
    assert metrics.registry.get_sample_value("keeper_contract_paused", paused) == 0.0


async def _left_alone(
    escrows: Escrows, rpc: RpcClient, keeper: Keeper, index: Index, *, blocks: int
) -> None:
    """Mine ``blocks`` blocks, ticking on each: nothing is sent, nor even simulated."""
    for _ in range(blocks):
        escrows.control.mine()
        assert await _tick(rpc, keeper, index) == 0
        assert keeper.last is not None and keeper.last.simulated == []


async def test_a_finalize_paying_no_award_ends_the_task_in_the_index(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """Revision 21 finalizes a verdict whose every award is zero without an event. The
    keeper (on the index's connection, as in the daemon) finalizes it once; probing its
    confirmed finalize it finds the chain refusing another (NotInAppealingState) and records
    that, so the index shows the task Accepted and stops handing it to the keeper."""
    dm = Diamond(escrows)
    task_id, deadline = dm.appealing_task(award=0)
    metrics = Metrics()
    keeper = make_keeper(store=index.indexing.store, metrics=metrics)
    escrows.control.mine_at(deadline)
    sent = 0
    for _ in range(8):
        sent += await _tick(rpc, keeper, index)
        if index.task(dm.address, task_id).status is not TaskStatus.APPEALING:
            break
        escrows.control.mine()
    assert sent == 1
    assert dm.task(task_id).status is TaskStatus.ACCEPTED
    row = index.task(dm.address, task_id)
    assert (row.status, row.paid_amount, row.extra["award_total"]) == (TaskStatus.ACCEPTED, 0, "0")
    # sent alone, not through Multicall3: only its own receipt can say it worked
    [attempt] = keeper_books.all_attempts(keeper.store)
    [intent] = keeper_books.all_intents(keeper.store)
    assert (attempt.kind, intent.outcome) == ("call", "confirmed")
    assert intent.receipt_block is not None
    assert int(row.extra["finalized_silently_at"]) >= intent.receipt_block
    assert _counted(metrics, "keeper_tasks_ended_silently_total", how="finalize") == 1
    assert _counted(metrics, "keeper_tasks_ended_silently_total", how="resolve") == 0
    await _left_alone(escrows, rpc, keeper, index, blocks=1)


async def test_a_silent_finalize_by_someone_else_is_seen_by_the_gate(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """Someone else finalizes a zero-award verdict first: the keeper's gate simulation
    answers NotInAppealingState, nothing is sent, and the index records the task Accepted,
    so the keeper does not simulate it again every few blocks."""
    dm = Diamond(escrows)
    task_id, deadline = dm.appealing_task(award=0)
    keeper = make_keeper(store=index.indexing.store)
    escrows.control.mine_at(deadline)
    dm.direct(DEPLOYER, "finalizeVerdict(bytes32)", bytes.fromhex(task_id[2:]))
    assert await _tick(rpc, keeper, index) == 0
    assert index.task(dm.address, task_id).status is TaskStatus.ACCEPTED
    assert keeper_books.outcome_counts(keeper.store) == {"preempted": 1}
    await _left_alone(escrows, rpc, keeper, index, blocks=6)  # past the look-again interval


async def test_a_stuck_silent_finalize_is_replaced_by_a_call_again(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """A finalize paying no award, stuck below the base fee, is re-signed at its nonce as a
    call again, not through Multicall3, where its success would not show: it is confirmed,
    and the index then has the task Accepted."""
    dm = Diamond(escrows)
    task_id, deadline = dm.appealing_task(award=0)
    escrows.control.set_base_fee(10**9)
    escrows.control.mine_at(deadline)
    keeper = make_keeper(store=index.indexing.store)
    escrows.control.set_automine(False)
    try:
        assert await _tick(rpc, keeper, index) == 1
        [first] = keeper_books.all_attempts(keeper.store)
        escrows.control.set_base_fee(first.max_fee + 10**9)  # it cannot be included now
        for _ in range(keeper.settings.bump_after_blocks + 1):
            escrows.control.mine()
            await _tick(rpc, keeper, index)
    finally:
        escrows.control.set_automine(True)
    for _ in range(4):
        escrows.control.mine()
        await _tick(rpc, keeper, index)
    attempts = keeper_books.all_attempts(keeper.store)
    assert [(a.kind, a.status) for a in attempts] == [("call", "replaced"), ("call", "confirmed")]
    [intent] = keeper_books.all_intents(keeper.store)
    assert intent.outcome == "confirmed"
    assert dm.task(task_id).status is TaskStatus.ACCEPTED
    assert index.task(dm.address, task_id).status is TaskStatus.ACCEPTED


async def test_a_standby_keeper_leaves_the_record_to_the_leader(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """On a daemon standing by (its index store fenced by a lease it does not hold) the
    gate's finding is not written: the tick goes on, and the task stays as the leader's
    index has it until a leading keeper looks again."""
    dm = Diamond(escrows)
    task_id, deadline = dm.appealing_task(award=0)
    keeper = make_keeper(store=index.indexing.store)
    escrows.control.mine_at(deadline)
    dm.direct(DEPLOYER, "finalizeVerdict(bytes32)", bytes.fromhex(task_id[2:]))
    summary = await _standby_tick(rpc, keeper, index)
    assert (summary.sent, keeper_books.outcome_counts(keeper.store)) == (0, {"preempted": 1})
    assert index.task(dm.address, task_id).status is TaskStatus.APPEALING
    index.indexing.store.fence = None  # leading now: the keeper's next look records it
    for _ in range(keeper.settings.redecide_after_blocks):
        escrows.control.mine()
        await _tick(rpc, keeper, index)
    assert index.task(dm.address, task_id).status is TaskStatus.ACCEPTED


def _resolved_silently(index: Index) -> int:
    """How many silent resolutions the index holds (keeper.domain.reads.RESOLVE_SILENT)."""
    row = index.conn.execute(
        "SELECT count(*) FROM chain_reads WHERE kind = ?", (RESOLVE_SILENT,)
    ).fetchone()
    return int(row[0])


async def test_a_dispute_resolved_paying_no_award_ends_the_task_in_the_index(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """Revision 21 settles a dispute whose every award is zero without an event, and no
    keeper call is due on a Disputed task. The keeper's probe (resolveDispute from any
    address, answered NotInDisputedState once the task is no longer Disputed) is recorded,
    so the index has the task Accepted; it is not probed again."""
    dm = Diamond(escrows)
    task_id = dm.disputed_task()
    keeper = make_keeper(store=index.indexing.store)
    dm.resolve(task_id, 0)
    resolved = (await rpc.get_block("latest")).number  # type: ignore[union-attr]
    assert dm.task(task_id).status is TaskStatus.ACCEPTED
    await index.to_head()
    assert index.task(dm.address, task_id).status is TaskStatus.DISPUTED  # no event says
    assert await _tick(rpc, keeper, index) == 0
    assert keeper.last is not None
    assert keeper.last.disputes_probed == [(dm.address, task_id)]
    row = index.task(dm.address, task_id)
    assert (row.status, row.paid_amount) == (TaskStatus.ACCEPTED, 0)
    assert int(row.extra["resolved_silently_at"]) >= resolved
    assert row.dispute_resolver == address_of(RESOLVER)
    for _ in range(keeper.settings.redecide_after_blocks + 1):  # past the probe's cadence
        escrows.control.mine()
        assert await _tick(rpc, keeper, index) == 0
        assert keeper.last.disputes_probed == []
    assert _resolved_silently(index) == 1


async def test_a_task_still_disputed_is_probed_and_stays_disputed(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """While the dispute is open the probe answers something else than NotInDisputedState
    (NotDisputeResolver, from the keeper's address): nothing is recorded, and the task is
    probed again every few blocks, not at every block. A paid resolution then ends it by
    its own event (TaskCompleted)."""
    dm = Diamond(escrows)
    task_id = dm.disputed_task()
    keeper = make_keeper(store=index.indexing.store)
    every = keeper.settings.redecide_after_blocks
    probed = []
    for _ in range(every + 1):
        assert await _tick(rpc, keeper, index) == 0
        assert keeper.last is not None
        probed.append(keeper.last.disputes_probed)
        escrows.control.mine()
    assert probed == [[(dm.address, task_id)], *[[]] * (every - 1), [(dm.address, task_id)]]
    assert index.task(dm.address, task_id).status is TaskStatus.DISPUTED
    assert _resolved_silently(index) == 0
    dm.resolve(task_id, 10**6)
    await _tick(rpc, keeper, index)
    row = index.task(dm.address, task_id)
    assert row.status is TaskStatus.ACCEPTED and row.paid_amount > 0  # less the fee
    assert ("resolved_silently_at" in row.extra, _resolved_silently(index)) == (False, 0)


async def test_a_standby_keeper_leaves_the_silent_resolution_to_the_leader(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """On a daemon standing by (its index store fenced by a lease it does not hold) the
    probe's finding is not written: the tick goes on, and the task stays Disputed until a
    leading keeper probes it again."""
    dm = Diamond(escrows)
    task_id = dm.disputed_task()
    keeper = make_keeper(store=index.indexing.store)
    dm.resolve(task_id, 0)
    summary = await _standby_tick(rpc, keeper, index)
    assert summary.disputes_probed == [(dm.address, task_id)]
    assert index.task(dm.address, task_id).status is TaskStatus.DISPUTED
    assert _resolved_silently(index) == 0
    index.indexing.store.fence = None  # leading now: the keeper's next probe records it
    for _ in range(keeper.settings.redecide_after_blocks):
        escrows.control.mine()
        await _tick(rpc, keeper, index)
    assert index.task(dm.address, task_id).status is TaskStatus.ACCEPTED


async def test_a_paused_diamond_gets_no_dispute_probe_until_unpaused(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """Paused, the diamond answers EnforcedPause before anything else, so a probe would
    say nothing: none is made. Once unpaused the Disputed task is probed at once."""
    dm = Diamond(escrows)
    task_id = dm.disputed_task()
    keeper = make_keeper(store=index.indexing.store)
    dm.direct(DEPLOYER, "pause()")
    for _ in range(keeper.settings.redecide_after_blocks + 1):
        await _tick(rpc, keeper, index)
        assert keeper.last is not None
        assert (list(keeper.last.paused), keeper.last.disputes_probed) == ([dm.address], [])
        escrows.control.mine()
    dm.direct(DEPLOYER, "unpause()")
    await _tick(rpc, keeper, index)
    assert keeper.last.disputes_probed == [(dm.address, task_id)]


async def test_a_tick_on_an_older_head_does_not_probe_a_task_disputed_after_it(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """The indexer goes on while a tick runs: at the tick's head a task the index now has
    Disputed may not even exist, and resolveDispute there answers NotInDisputedState too.
    Such a task waits for a head at or past its last change; nothing is recorded."""
    await index.to_head()
    before = await rpc.get_block("latest")
    assert before is not None
    dm = Diamond(escrows)
    task_id = dm.disputed_task()
    keeper = make_keeper(store=index.indexing.store)
    await index.to_head()  # the index is past ``before`` when the tick reads it
    summary = await keeper.tick(before, [], [])
    assert (summary.disputes_probed, _resolved_silently(index)) == ([], 0)
    assert await _tick(rpc, keeper, index) == 0
    assert keeper.last is not None
    assert keeper.last.disputes_probed == [(dm.address, task_id)]
    assert _resolved_silently(index) == 0


@pytest.mark.parametrize("batched", [True, False], ids=["multicall", "alone"])
async def test_a_failed_dispute_probe_ends_the_tick_and_is_made_again(
    escrows: Escrows, make_keeper: MakeKeeper, index: Index, batched: bool
) -> None:
    """The node fails the probe's call (the Multicall3 call carrying it, or its own): the
    tick still ends, a warning names the task and nothing is recorded; the probe is made
    again at its cadence and then records the silent resolution."""
    dm = Diamond(escrows)
    task_id = dm.disputed_task()
    dm.resolve(task_id, 0)
    async with RpcProxy(escrows.url) as node:
        client = make_rpc(node.url, attempts=1)
        try:
            metrics = Metrics()
            keeper = make_keeper(client=client, store=index.indexing.store, metrics=metrics,
                                 multicall=escrows.d.multicall if batched else None)  # fmt: skip
            await keeper.detect_dialects()
            target = escrows.d.multicall if batched else dm.address
            node.rules.on("eth_call", to=target, error=10**6, error_code=-32603,
                          error_message="internal error")  # fmt: skip
            with capture_logs() as logs:
                assert await _tick(client, keeper, index) == 0
            assert keeper.last is not None
            assert keeper.last.disputes_probed == [(dm.address, task_id)]
            (said,) = [e for e in logs if e["event"] == "keeper_dispute_probe_failed"]
            assert (said["contract"], said["subject"]) == (dm.address, task_id)
            assert index.task(dm.address, task_id).status is TaskStatus.DISPUTED
            assert _resolved_silently(index) == 0
            assert _counted(metrics, "keeper_dispute_probes_total", outcome="failed") == 1
            node.rules.clear()
            for _ in range(keeper.settings.redecide_after_blocks):
                escrows.control.mine()
                await _tick(client, keeper, index)
            assert index.task(dm.address, task_id).status is TaskStatus.ACCEPTED
            assert _resolved_silently(index) == 1
        finally:
            await client.close()


async def test_dispute_probes_share_one_multicall_round_trip(
    escrows: Escrows, make_keeper: MakeKeeper, index: Index
) -> None:
    """With Multicall3 configured, a tick's dispute probes go in aggregate3 calls of
    ``batch_size`` (here 2: three tasks, two calls), none to the diamond alone; each
    call's own answer decides its task (one resolved silently, two still Disputed)."""
    dm = Diamond(escrows)
    tasks = [dm.disputed_task() for _ in range(3)]
    dm.resolve(tasks[1], 0)
    async with RpcProxy(escrows.url) as node:
        client = make_rpc(node.url)
        try:
            metrics = Metrics()
            keeper = make_keeper(
                client=client, store=index.indexing.store, batch_size=2, metrics=metrics
            )
            await keeper.detect_dialects()
            await index.to_head()
            before = len(node.requests_for("eth_call"))
            assert await _tick(client, keeper, index) == 0
            assert keeper.last is not None
            assert sorted(keeper.last.disputes_probed) == sorted((dm.address, t) for t in tasks)
            probes = [
                p[0]["to"].lower()
                for p in node.requests_for("eth_call")[before:]
                if p[0].get("to", "").lower() in (dm.address.lower(), escrows.d.multicall.lower())
            ]
            assert probes == [escrows.d.multicall.lower()] * 2
        finally:
            await client.close()
    statuses = [index.task(dm.address, t).status for t in tasks]
    assert statuses == [TaskStatus.DISPUTED, TaskStatus.ACCEPTED, TaskStatus.DISPUTED]
    assert _resolved_silently(index) == 1
    probes = "keeper_dispute_probes_total"
    assert _counted(metrics, probes, outcome="still_disputed") == 2
    assert _counted(metrics, probes, outcome="resolved_silently") == 1
    assert _counted(metrics, probes, outcome="failed") == 0
    assert _counted(metrics, "keeper_tasks_ended_silently_total", how="resolve") == 1


async def test_dispute_probes_are_made_alone_where_multicall_has_no_code(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """A configured Multicall3 address with no code answers aggregate3 with empty data,
    which holds no results: the probes are made one by one instead, and still decide."""
    dm = Diamond(escrows)
    task_id = dm.disputed_task()
    dm.resolve(task_id, 0)
    nowhere = "0x" + "77" * 20
    assert await rpc.get_code(nowhere, "latest") == b""
    keeper = make_keeper(store=index.indexing.store, multicall=nowhere)
    await keeper.detect_dialects()
    with capture_logs() as logs:
        assert await _tick(rpc, keeper, index) == 0
    assert not [e for e in logs if e["event"] == "keeper_dispute_probe_failed"]
    assert index.task(dm.address, task_id).status is TaskStatus.ACCEPTED
    assert _resolved_silently(index) == 1


async def test_a_task_market_of_another_dialect_gets_no_dispute_probe(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, index: Index
) -> None:
    """The probe's call and its check order are the diamond's (TaskMarket): a Disputed
    task on the contract before revision 7 (TaskMarketPre7, whose resolveDispute checks
    the caller first) is left alone, while one on the diamond is probed in the same tick."""
    e, legacy = escrows, escrows.d.taskmarket_legacy
    on_diamond = Diamond(e).disputed_task()
    task_id, tid = "0x" + "0e" * 32, b"\x0e" * 32
    e.open_task(legacy, task_id, e.now() + 3600)
    e.call(CLIENT, legacy, "assignEvaluator(bytes32,address,uint256,uint16,uint32,uint32,address)",
           tid, address_of(EVALUATOR), 0, 100, 600, 600, address_of(RESOLVER))  # fmt: skip
    e.call(WORKER, legacy, "claimTask(bytes32)", tid)
    e.call(WORKER, legacy, "submitWork(bytes32,bytes32)", tid, b"\x11" * 32)
    e.call(EVALUATOR, legacy,
           "evaluate(bytes32,uint8,uint16,uint16,bytes32,(address,uint256,uint16)[])",
           tid, 0, 90, 80, b"\x22" * 32, [(address_of(WORKER), 1, 1)])  # fmt: skip
    e.call(WORKER, legacy, "appeal(bytes32)", tid)
    keeper = make_keeper(store=index.indexing.store)
    assert await _tick(rpc, keeper, index) == 0
    assert index.task(legacy, task_id).status is TaskStatus.DISPUTED
    assert keeper.dialects is not None
    assert keeper.dialects.dialect(legacy) is TASKMARKET_PRE7
    assert keeper.last is not None
    assert keeper.last.disputes_probed == [(Diamond(e).address, on_diamond)]


async def test_the_daemon_ends_a_silent_finalize_and_a_silent_resolution_in_its_index(
    escrows: Escrows, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole daemon, as ``keeper devnet`` configures it: its keeper finalizes a verdict
    paying no award (sent alone, confirmed, then probed) and probes a dispute the resolver
    settled paying no award; its index ends both tasks Accepted, from no event."""
    dm = Diamond(escrows)
    finalized, deadline = dm.appealing_task(award=0)
    resolved = dm.disputed_task()
    dm.resolve(resolved, 0)
    escrows.control.mine_at(deadline)
    daemon = await devnet_daemon(escrows.url, tmp_path, monkeypatch, deployment=escrows.d)
    conn = connect(daemon.cfg.database.target, readonly=True)

    def extra(task_id: str) -> dict[str, str]:
        row = conn.execute(
            "SELECT * FROM tasks WHERE contract = ? AND task_id = ?", (dm.address, task_id)
        ).fetchone()
        task = None if row is None else task_from_row(row)
        return task.extra if task is not None and task.status is TaskStatus.ACCEPTED else {}

    running = asyncio.create_task(daemon.run())
    try:
        with capture_logs() as logs:
            for _ in range(300):
                if "finalized_silently_at" in extra(finalized) and "resolved_silently_at" in (
                    extra(resolved)
                ):
                    break
                assert not running.done(), running
                await asyncio.to_thread(escrows.control.mine)
                await asyncio.sleep(0.1)
        assert "finalized_silently_at" in extra(finalized), [e["event"] for e in logs]
        assert "resolved_silently_at" in extra(resolved), [e["event"] for e in logs]
        said = {(e["event"], e["subject"]) for e in logs if "subject" in e}
        assert ("keeper_finalized_silently", finalized) in said
        assert ("keeper_resolved_silently", resolved) in said
    finally:
        conn.close()
        daemon.stop.set()
        await asyncio.wait({running}, timeout=30)
    assert running.result() == 0
